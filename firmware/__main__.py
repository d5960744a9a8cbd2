"""``python -m firmware``: dump or validate a firmware image.

::

    python -m firmware inspect IMAGE
    python -m firmware validate IMAGE [--preset NAME | --config cfg.json] [--device-bytes N]

Both first say what they read (``IMAGE: firmware image, N bytes``). ``validate`` then prints
every problem (one per line) and exits 1, or prints ``valid`` and exits 0. Unreadable files,
files that are not images (a ``.tsr`` compiled network is a zip archive: ``tessera firmware``
reads the images inside it) and bad options exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spec.config import PRESETS, AccelConfig, ConfigError
from spec.layouts import IMAGE_MAGIC

from .image import HEADER_BYTES, inspect, validate

__all__ = ["main", "build_parser", "config_from_args", "CliError", "ZIP_MAGIC"]


class CliError(Exception):
    """A clean command-line error: printed to stderr, exit status 2."""


#: The first bytes of a zip archive (a ``.tsr`` compiled network is one).
ZIP_MAGIC = b"PK\x03\x04"


def _read(path: str) -> bytes:
    try:
        blob = Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read image {path!r}: {exc.strerror or exc}") from None
    if blob.startswith(ZIP_MAGIC):
        raise CliError(f"{path} is a zip archive (a compiled network .tsr?), not a firmware "
                        f"image; `tessera firmware validate|inspect {path}` reads every image "
                        f"inside a .tsr")
    if len(blob) < 4 or int.from_bytes(blob[:4], "little") != IMAGE_MAGIC:
        found = blob[:4].hex() or "nothing"
        raise CliError(f"{path} is not a firmware image: it starts with {found}, not the magic "
                       f"{IMAGE_MAGIC.to_bytes(4, 'little').hex()}")
    if len(blob) < HEADER_BYTES:
        raise CliError(f"{path} is truncated: {len(blob)} bytes, less than the "
                       f"{HEADER_BYTES}-byte header")
    return blob


def config_from_args(args) -> AccelConfig:
    if args.config is None:
        return PRESETS[args.preset]
    try:
        return AccelConfig.from_json(Path(args.config).read_text())
    except OSError as exc:
        raise CliError(f"cannot read config {args.config!r}: {exc.strerror or exc}") from None
    except (ConfigError, ValueError, TypeError) as exc:
        raise CliError(f"bad config {args.config!r}: {exc}") from None


def _device_bytes(text: str) -> int:
    """``--device-bytes``: a positive int, decimal or with a 0x / 0o / 0b prefix."""
    try:
        value = int(text, 0)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a positive int (decimal or 0x hex), not {text!r}")
    return value


def build_parser(prog: str = "python -m firmware") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    # no abbreviated options: `tessera firmware` sees whether --preset was given
    p = sub.add_parser("inspect", help="print a readable dump of an image", allow_abbrev=False)
    p.add_argument("image")
    p = sub.add_parser("validate", help="print every problem of an image (exit 1 if any)",
                       allow_abbrev=False)
    p.add_argument("image")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=sorted(PRESETS), default="default",
                       help="accelerator preset the image must target (default: default; "
                            "for a .tsr given to tessera firmware, the config it was compiled "
                            "for)")
    group.add_argument("--config", metavar="CFG.JSON", help="AccelConfig JSON file")
    p.add_argument("--device-bytes", type=_device_bytes, default=None,
                   help="device memory size in bytes (default: the config's dram_bytes)")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m firmware") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        cfg = config_from_args(args) if args.command == "validate" else None   # options first
        blob = _read(args.image)
        print(f"{args.image}: firmware image, {len(blob)} bytes")
        if args.command == "inspect":
            sys.stdout.write(inspect(blob))
            return 0
        problems = validate(blob, cfg, device_bytes=args.device_bytes)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return 1
    print("valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
