"""The ``tessera`` command: one entry point that dispatches to each package's own CLI.

::

    tessera plan ...        # python -m planner (tiling, cycle model, reports)
    tessera firmware ...    # python -m firmware (inspect / validate images), and .tsr files

Each subcommand is a function ``f(argv) -> int`` in its own module; this file only maps names
to ``module:function`` (imported lazily, so ``tessera plan`` never imports the network stack).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys

__all__ = ["SUBCOMMANDS", "main"]

#: subcommand -> (module with ``main(argv)``, one-line help).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("planner.__main__:main",
             "tile GEMMs, convolutions or workload files (python -m planner)"),
    "firmware": ("flow.firmware_cli:main",
                 "inspect or validate firmware images, or every image of a .tsr"),
    "explain": ("flow.cli:main", "assign an ONNX model's ops to host or accelerator, and why"),
    "compile": ("flow.cli:compile_main", "compile an ONNX model into accelerator images (.tsr)"),
    "run": ("flow.cli:run_main", "run a compiled network (.tsr) on the golden device or RTL"),
    "tunedb": ("flow.tunedb_cli:main",
               "build, query, inspect or export tuning databases (seed 001)"),
}


def _usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: tessera COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"tessera: unknown command {name!r}; choose one of {', '.join(SUBCOMMANDS)}",
              file=sys.stderr)
        return 2
    module, function = SUBCOMMANDS[name][0].split(":")
    run = getattr(importlib.import_module(module), function)
    try:
        if "prog" in inspect.signature(run).parameters:     # its usage names this command
            return run(rest, prog=f"tessera {name}")
        return run(rest)
    except BrokenPipeError:
        # the reader went away (`tessera ... | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
