"""``python -m hw [--preset P | --config cfg.json] [--out build]``: generate Verilog."""

import argparse
import sys
from pathlib import Path

from spec.config import PRESETS, AccelConfig, ConfigError

from .build import emit


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=sorted(PRESETS), default="default")
    group.add_argument("--config", type=Path, help="AccelConfig JSON file")
    parser.add_argument("--out", type=Path, default=Path("build"))
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = parser.parse_args(argv)
    try:
        cfg = (AccelConfig.from_json(args.config.read_text()) if args.config
               else PRESETS[args.preset])
    except (ConfigError, OSError) as exc:
        parser.error(str(exc))
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: exists and is not a directory")
    out = emit(cfg, args.out, force=args.force)
    print(f"config_id {cfg.config_id:08x}: {out}")
    for path in sorted(out.iterdir()):
        if not path.name.startswith("."):
            print(f"  {path.name:16} {path.stat().st_size:>10} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
