"""Networks: ONNX import, post-training quantisation, lowering onto accelerator layers, a
bit-exact int8 reference and the seed-004 host/accelerator assignment (``tessera explain``).

Needs the ``onnx`` package (and ``onnxruntime`` for quantisation); nothing here imports
Amaranth. Modules: :mod:`.graph` (IR), :mod:`.onnx_import`, :mod:`.quantize`,
:mod:`.reference`, :mod:`.assign`, :mod:`.models`, :mod:`.cli`.
"""
