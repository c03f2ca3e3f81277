"""The ``ratelnn`` command line (docs/architecture.md §10, docs/cli.md): one module per command (build,
run, inspect, joint), :mod:`.common` for what they share, here the parser and :func:`main`.

Exit codes: 0 ok, 2 usage or configuration errors (UsageError, ConfigError,
DeviceConfigError: bad options, ``--set`` or config values, missing files), 1 any other
error (the model does not match its config, bad data contents...), 130 interrupted.
Errors print one line on stderr; ``--debug`` adds the traceback.  Every file is written
atomically; TensorFlow and MXNet are imported only by the commands that need them.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Optional, Sequence

from ..config import ConfigError
from ..errors import RatelError
from . import build, inspect, joint, pulsar2, run
from .common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, one_line


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    common = argparse.ArgumentParser(add_help=False)   # --debug after the command too
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the traceback of an error")
    parser = argparse.ArgumentParser(
        prog="ratelnn", description="Quantize and compile TensorFlow/MXNet/ONNX models for the emulated NPU.")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (build, run, inspect, joint):
        command.add_parser(sub, [common])
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    argv, overrides = pulsar2.split_overrides(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:   # --help, or argparse's usage errors (code 2)
        return int(e.code or 0) if isinstance(e.code, int) or e.code is None else EXIT_USAGE
    if overrides:   # build's --quant.KEY VALUE... (argparse has no wildcard options)
        args.section_overrides = overrides
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print(f"ratelnn {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:   # stdout closed early (``ratelnn inspect ... | head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as e:   # noqa: BLE001 - every error becomes one line and an exit code
        from ..npu.device import DeviceConfigError
        code = EXIT_USAGE if isinstance(e, (UsageError, ConfigError, DeviceConfigError)) else EXIT_ERROR
        if args.debug:
            traceback.print_exc()
        label = "" if isinstance(e, RatelError) else f"{type(e).__name__}: "
        print(f"ratelnn {args.command}: error: {label}{one_line(e)}", file=sys.stderr)
        return code
