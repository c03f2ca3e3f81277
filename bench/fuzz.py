"""Fuzz the readers of untrusted input and write the results into docs/reliability.md.

    python bench/fuzz.py                         # 10,000 executions per target, atheris if installed
    python bench/fuzz.py --runs 500 --mode mutate --targets engine,stats --no-doc

Targets and the outcome classes: ratelnn/testing/fuzz.py.  Every target runs in worker
subprocesses (a crash or a hang is counted, the worker restarted); the table and the
distinct findings go to the section "fuzz" of docs/reliability.md (``--no-doc``: print only).
Exit status 1 if any target had a crash, a hang or a raw exception.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ratelnn.testing.fuzz import TARGETS, fuzz_target  # noqa: E402

from _report import cpu_name, write_section  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"
WHAT = {"engine": "engine loader: `Engine.from_bytes` (native decoder + validator), then the reference and "
                  "native executors on accepted engines (outputs must agree)",
        "stats": "statistics reader: `read_statistics_file` of a `.rstats` file",
        "graphdef": "GraphDef importer: `read_graphdef` of a `.pb` file, then `converter()` (TF import, passes)",
        "symbol": "MXNet symbol reader: symbol JSON text through `converter()` (parse, MXNet shape inference, "
                  "import, passes)"}


def _has_atheris() -> bool:
    try:
        import atheris  # noqa: F401
        return True
    except ImportError:
        return False


def markdown(results, command: str) -> str:
    lines = ["## Fuzzing results", "",
             f"`{command}` on {cpu_name()}, Python {platform.python_version()}. Mode `atheris`: coverage-guided "
             "libFuzzer over instrumented ratelnn code, seeded with one valid input per target; mode `mutate`: "
             "seeded byte and token mutations. Engines and statistics files are also tried resealed (a correct "
             "CRC over the mutated contents) so that the decoder behind the checksum is reached.", "",
             "| target | what runs | mode | executions | clean ratelnn error | accepted | raw exception | crash "
             "| hang | seconds |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['target']} | {WHAT[r['target']]} | {r['mode']} | {r['executions']:,} | "
                     f"{r['clean error']:,} | {r['accepted']:,} | {r['raw exception']} | {r['crash']} | {r['hang']} | "
                     f"{r['seconds']:.0f} |")
    findings = [f for r in results for f in r["findings"]]
    lines.append("")
    if findings:
        lines.append("Findings of this run (distinct by type and place):")
        lines.append("")
        for f in findings:
            lines.append(f"- {f['target']}: {f['type']} at {f.get('where', '-')}: "
                         f"{(f.get('message') or f.get('stderr') or '').strip()[:160]}")
    else:
        lines.append("No crash, hang or raw exception.")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10_000, help="executions per target")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--mode", choices=("auto", "atheris", "mutate"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without an outcome that count as a hang")
    p.add_argument("--json", help="also write the results (findings with their inputs) to this file")
    p.add_argument("--no-doc", action="store_true", help="do not write docs/reliability.md")
    a = p.parse_args()
    mode = ("atheris" if _has_atheris() else "mutate") if a.mode == "auto" else a.mode
    results = []
    for target in a.targets.split(","):
        r = fuzz_target(target, a.runs, seed=a.seed, mode=mode, timeout=a.timeout)
        print(json.dumps({k: v for k, v in r.items() if k != "findings"}), flush=True)
        for f in r["findings"]:
            print("  finding:", json.dumps({k: v for k, v in f.items() if k != "input"})[:400], flush=True)
        results.append(r)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    command = "python bench/fuzz.py " + " ".join(sys.argv[1:])
    if not a.no_doc:
        write_section("fuzz", markdown(results, command.strip()), doc=DOC)
    bad = sum(r["raw exception"] + r["crash"] + r["hang"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
