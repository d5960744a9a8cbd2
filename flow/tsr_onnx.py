"""The quantised model in a ``.tsr`` file (``model.onnx``) without a second copy of its weights.

The compiled network already stores every weight, bias and requantisation array as an
``arrays/I.npy`` member, and the quantised model's initialisers hold the same bytes (98% of
ResNet-50's). :func:`share_initializers` replaces the data of every initialiser whose bytes
some member holds by an ONNX external-data reference to that member: ``location`` the member's
name, ``offset`` the ``.npy`` header's length, ``length`` the data's. :func:`restore_initializers`
puts the bytes back on load, so the model handed to onnxruntime is the one compiled, byte for
byte (:func:`share_initializers` keeps the model as it is where that would not hold). The
references are ONNX's own, relative to the archive's root, so ``onnx.load`` of an unzipped
``.tsr``'s ``model.onnx`` finds the weights too.

``onnx`` is an optional dependency (the ``dev`` extra): it is imported where it is used, so that
a ``.tsr`` without ``model.onnx`` loads without it.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator, Mapping

__all__ = ["share_initializers", "restore_initializers", "SHARE_MIN_BYTES", "TsrModelError"]

#: Initialisers smaller than this keep their bytes (a reference costs about 40 bytes).
SHARE_MIN_BYTES = 256
#: The members a reference may name.
_MEMBER = re.compile(r"arrays/[0-9]+\.npy")
#: What an offset or a length may be.
_COUNT = re.compile(r"[0-9]+")


class TsrModelError(ValueError):
    """A ``model.onnx`` that is not an ONNX model, or whose reference does not resolve (a
    damaged or hand-edited file)."""


def share_initializers(qmodel: bytes, members: Mapping[str, tuple[bytes, int]]) -> bytes:
    """``qmodel`` (a serialised ``ModelProto``) with the data of each top-graph initialiser of
    at least :data:`SHARE_MIN_BYTES` stored as ``raw_data`` (and no ``data_location`` or
    external data of its own) and held byte for byte by one of ``members`` (``name ->
    (member bytes, offset of the data in them)``) replaced by a reference to that member.
    Returns ``qmodel`` itself if nothing is shared, or if :func:`restore_initializers` would
    not give ``qmodel`` back byte for byte (a serialisation this one does not reproduce)."""
    import onnx

    by_digest: dict[tuple[int, bytes], tuple[str, int]] = {}
    for name, (data, offset) in members.items():
        if not _MEMBER.fullmatch(name):
            raise ValueError(f"members: {name!r} is not an arrays/I.npy member")
        view = memoryview(data)[offset:]
        if len(view) >= SHARE_MIN_BYTES:
            by_digest.setdefault((len(view), hashlib.sha256(view).digest()), (name, offset))
    model = onnx.load_from_string(qmodel)
    shared = 0
    for init in model.graph.initializer:
        if not init.HasField("raw_data") or len(init.raw_data) < SHARE_MIN_BYTES or \
                init.HasField("data_location") or len(init.external_data):
            continue
        raw = init.raw_data
        hit = by_digest.get((len(raw), hashlib.sha256(raw).digest()))
        if hit is None:
            continue
        name, offset = hit
        if memoryview(members[name][0])[offset:] != raw:       # a digest collision: keep
            continue
        init.ClearField("raw_data")
        for key, value in (("location", name), ("offset", str(offset)),
                           ("length", str(len(raw)))):
            entry = init.external_data.add()
            entry.key, entry.value = key, value
        init.data_location = onnx.TensorProto.EXTERNAL
        shared += 1
    if not shared:
        return qmodel
    out = model.SerializeToString()
    if restore_initializers(out, lambda member: members[member][0]) != qmodel:
        return qmodel
    return out


def _tensors(graph, top: bool = True) -> Iterator[tuple[object, bool]]:
    """Every ``TensorProto`` of ``graph`` and its subgraphs, each with whether it is one of
    the top graph's initialisers (the only ones a reference may be)."""
    for t in graph.initializer:
        yield t, top
    for s in graph.sparse_initializer:
        yield s.values, False
        yield s.indices, False
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t, False
            yield from ((t, False) for t in a.tensors)
            if a.HasField("g"):
                yield from _tensors(a.g, False)
            for g in a.graphs:
                yield from _tensors(g, False)


def restore_initializers(qmodel: bytes, read: Callable[[str], bytes]) -> bytes:
    """``qmodel`` with every initialiser :func:`share_initializers` made a reference holding its
    bytes again, read with ``read(member name)`` (each member read once): the model as
    compiled. Raises :class:`TsrModelError` for a ``qmodel`` that does not parse, and, naming
    the tensor, for external data anywhere but in the top graph's initialisers, or a reference
    that is not to an ``arrays/I.npy`` member, to one there is not, past its end, or of another
    length than the tensor's."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_from_string(qmodel)
    except DecodeError as e:
        raise TsrModelError(f"model.onnx is not an ONNX model ({e})") from None
    cache: dict[str, bytes] = {}
    restored = 0
    for init, top in _tensors(model.graph):
        if init.data_location != onnx.TensorProto.EXTERNAL and not len(init.external_data):
            continue
        where = f"model.onnx tensor {init.name!r}"
        if not top:
            raise TsrModelError(f"{where}: external data outside the graph's initialisers")
        ref = {e.key: e.value for e in init.external_data}
        location = ref.get("location", "")
        if init.data_location != onnx.TensorProto.EXTERNAL or \
                not _MEMBER.fullmatch(location) or set(ref) != {"location", "offset", "length"}:
            raise TsrModelError(f"{where}: external data {ref}, not a reference to an "
                                f"arrays/I.npy member (location, offset, length)")
        if not (_COUNT.fullmatch(ref["offset"]) and _COUNT.fullmatch(ref["length"])):
            raise TsrModelError(f"{where}: offset {ref['offset']!r} and length "
                                f"{ref['length']!r} must be integers >= 0")
        offset, length = int(ref["offset"]), int(ref["length"])
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
        except KeyError:
            raise TsrModelError(f"{where}: data type {init.data_type} has no raw "
                                f"form") from None
        want = math.prod(init.dims) * itemsize
        if length != want:
            raise TsrModelError(f"{where}: length {length}, but {list(init.dims)} elements of "
                                f"{itemsize} bytes are {want}")
        if location not in cache:
            try:
                cache[location] = read(location)
            except KeyError:
                raise TsrModelError(f"{where}: refers to {location}, which the archive does "
                                    f"not hold") from None
        data = cache[location]
        if offset + length > len(data):
            raise TsrModelError(f"{where}: bytes {offset}..{offset + length} of {location}, "
                                f"which has {len(data)}")
        init.raw_data = data[offset:offset + length]
        del init.external_data[:]
        init.ClearField("data_location")
        restored += 1
    return model.SerializeToString() if restored else qmodel
