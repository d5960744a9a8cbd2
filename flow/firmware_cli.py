"""``tessera firmware``: ``python -m firmware`` for raw images, and for ``.tsr`` compiled
networks every image inside them.

::

    tessera firmware validate NET.tsr [--preset NAME | --config cfg.json] [--device-bytes N]
    tessera firmware inspect NET.tsr
    tessera firmware validate IMAGE ...       # a raw image: exactly python -m firmware

A ``.tsr`` (a zip archive, :meth:`flow.compile.CompiledNetwork.save`) is checked against the
configuration it was compiled for unless ``--preset`` or ``--config`` names another. The output
says what was read (``NET.tsr: compiled network 'name' for default (0x8d7ab0dd), K images``),
then one line per image (``segment0 (conv0, conv1): valid``, or its problems, indented); against
another configuration, one line saying the images are not for it (each image's problems would
all follow from that). Exit status 0 when every image is valid, 1 when one is not (or the
configuration differs), 2 when the file cannot be read.
"""

from __future__ import annotations

import sys

import firmware.__main__ as firmware_cli
from firmware.image import inspect, validate
from spec.config import PRESETS

from .compile import CompiledNetwork, CompileError

__all__ = ["main"]


def _is_archive(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(firmware_cli.ZIP_MAGIC)) == firmware_cli.ZIP_MAGIC
    except OSError:
        return False                # python -m firmware reports the unreadable file


def _named(cfg) -> str:
    """``cfg``'s preset name and config_id (``small (0xa5340150)``), or its config_id alone."""
    name = next((n for n, c in PRESETS.items() if c.config_id == cfg.config_id), None)
    return f"{name} ({cfg.config_id:#010x})" if name else f"config_id {cfg.config_id:#010x}"


def main(argv: list[str] | None = None, prog: str = "tessera firmware") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = firmware_cli.build_parser(prog).parse_args(argv)
    if not _is_archive(args.image):
        return firmware_cli.main(argv, prog)
    try:
        net = CompiledNetwork.load(args.image)
        given = getattr(args, "config", None) is not None or any(
            a.split("=")[0] == "--preset" for a in argv)
        cfg = firmware_cli.config_from_args(args) if given else net.cfg
    except (CompileError, firmware_cli.CliError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    segments = net.segments
    print(f"{args.image}: compiled network {net.name!r} for {_named(net.cfg)}, "
          f"{len(segments)} image{'s' if len(segments) != 1 else ''}")
    if args.command == "validate" and cfg.config_id != net.cfg.config_id:
        # every image would list the mismatch and what follows from it (tables past their
        # section, accumulators overflowing another config's): once is the news
        print(f"not for {_named(cfg)}: the images are {_named(net.cfg)}'s (every image's "
              f"config_id differs; compile the model for {_named(cfg)} to run it there)")
        return 1
    status, bad = 0, (0, 0)         # (problems, images with problems)
    for seg in segments:
        label = f"segment{seg.index} ({', '.join(seg.layers)}), {len(seg.image)} bytes"
        if args.command == "inspect":
            print(f"== {label}")
            sys.stdout.write(inspect(seg.image, cfg))
            continue
        problems = validate(seg.image, cfg, device_bytes=args.device_bytes)
        print(f"{label}: {'valid' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  {problem}")
        status |= 1 if problems else 0
        bad = (bad[0] + len(problems), bad[1] + bool(problems))
    if bad[0]:          # the total, as python -m firmware ends a raw image's problems
        print(f"{bad[0]} problem(s) found in {bad[1]} of {len(segments)} images",
              file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
