"""firmware: the image format (:mod:`firmware.image`), C headers, and ``python -m firmware``."""
