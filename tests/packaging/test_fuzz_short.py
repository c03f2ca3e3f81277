"""A short run of the fuzzers of bench/fuzz.py (docs/reliability.md
"Fuzzing"): seeded mutations of a valid engine, statistics file, GraphDef and MXNet symbol,
each target in worker subprocesses; no crash, no hang, no raw exception, and some inputs
accepted (the mutations reach past the first check)."""
from concurrent.futures import ThreadPoolExecutor

from ratelnn.testing.fuzz import fuzz_target

RUNS = {"engine": 150, "stats": 150, "graphdef": 40, "symbol": 50}


def test_short_fuzz_of_every_reader_finds_nothing():
    with ThreadPoolExecutor(len(RUNS)) as pool:
        results = list(pool.map(lambda t: fuzz_target(t, RUNS[t], seed=16, mode="mutate", timeout=60), RUNS))
    for r in results:
        assert r["executions"] == RUNS[r["target"]], r
        assert (r["raw exception"], r["crash"], r["hang"]) == (0, 0, 0), r["findings"]
        assert r["clean error"] > 0 and r["accepted"] > 0, r
