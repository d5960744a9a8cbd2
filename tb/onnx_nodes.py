"""The single-node tests shipped in the ``onnx`` wheel (``onnx.backend.test.case.node``), one
data set at a time, for :mod:`tb.onnx_cases` and :mod:`tb.qlinear`."""

from __future__ import annotations

import warnings
from typing import Any, Iterator

__all__ = ["node_tests"]


def node_tests(ops: tuple[str, ...]) -> Iterator[tuple[str, Any, dict, dict, Any]]:
    """``(name, node, attrs, by_name, expected)`` for every data set of every node test whose
    graph is one node of an operator in ``ops``, sorted by test name.

    ``name`` is the test's, suffixed ``_<i>`` when it has several data sets; ``attrs`` the node's
    attribute values as ``onnx`` returns them (one dict shared by the test's data sets);
    ``by_name`` the data set's inputs by graph input name; ``expected`` its first output.
    """
    import onnx
    from onnx.backend.test.case.node import collect_testcases

    # collect_testcases(op_type) filters only on its first call in a process (module-level
    # state, cached imports), so take every case and filter here; unrelated case generators
    # warn on overflow while importing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = {c.name: c for c in collect_testcases()}
    for name, case in sorted(cases.items()):
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type not in ops:
            continue
        node = graph.node[0]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for i, (inputs, outputs) in enumerate(case.data_sets):
            yield (name + (f"_{i}" if len(case.data_sets) > 1 else ""), node, attrs,
                   dict(zip([v.name for v in graph.input], inputs)), outputs[0])
