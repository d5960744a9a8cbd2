"""Audit of every user-facing validation path (issue 9: "every validation path (config, shape,
image, CLI arguments) has a test asserting a message that names the field and the allowed
range"). One row per (file, function, exception class): ``n`` is how many raise sites (or
argparse validations) the function holds, ``tests`` the tests in ``test_messages_<area>.py``
that trigger each of them and assert the field and its range or value set in the message.
``test_audit_table_matches_the_sources`` fails when a raise site is added, removed or moved to
another function without this table following; line moves inside a function do not matter.

| file | function | exception | n | tests |
|---|---|---|---|---|
| firmware/__main__.py | config_from_args | CliError | 2 | cli: test_firmware_unreadable_config, test_firmware_bad_config |
| firmware/__main__.py | _device_bytes | argparse.ArgumentTypeError | 1 | cli: test_firmware_device_bytes |
| firmware/__main__.py | build_parser | argparse --device-bytes | 1 | cli: test_firmware_device_bytes, test_firmware_device_bytes_hex_accepted |
| firmware/__main__.py | build_parser | argparse --preset | 1 | cli: test_firmware_preset_choice, test_firmware_preset_and_config_exclusive |
| firmware/__main__.py | build_parser | argparse add_subparsers | 1 | cli: test_firmware_subcommand |
| firmware/__main__.py | _read | CliError | 4 | cli: test_firmware_unreadable_image, test_firmware_tsr_archive, test_firmware_not_an_image |
| firmware/builder.py | ImageBuilder.__init__ | ValueError | 2 | image: test_builder_image_addr, test_builder_data_addr |
| firmware/builder.py | ImageBuilder._all_or_nothing.call | <re-raise> | 1 | image: test_builder_refused_layer_leaves_nothing_behind (the layer method's own error passes through unchanged, after the builder is restored) |
| firmware/builder.py | ImageBuilder._claim | ValueError | 2 | image: test_builder_layer_name, test_builder_layer_name_unique |
| firmware/builder.py | ImageBuilder.buffer | ValueError | 3 | image: test_builder_buffer_name_unique, test_builder_buffer_nbytes, test_builder_buffer_fits |
| firmware/builder.py | ImageBuilder.local | ValueError | 4 | image: test_builder_local_name_unique, test_builder_local_nbytes, test_builder_local_fits, test_builder_local_past_32_bit_addresses |
| firmware/builder.py | ImageBuilder.build | ImageError | 3 | image: test_builder_needs_layers, test_builder_image_overlaps_data, test_builder_hardware_rules, test_builder_output_must_stay_in_its_buffer |
| firmware/builder.py | ImageBuilder.build.read_words | ImageError | 1 | internal: read_words only sees the builder's own QUANT references; no public input reaches it |
| firmware/builder.py | Requant.__post_init__ | ValueError | 1 | image: test_builder_requant_post_mode |
| firmware/builder.py | ImageBuilder.conv | ValueError | 6 | image: test_builder_conv_shape_type, test_builder_conv_batch_groups, test_builder_conv_weights, test_builder_conv_row_stride, test_builder_conv_rows, test_builder_conv_diagonal |
| firmware/builder.py | ImageBuilder.gemm | ValueError | 3 | image: test_builder_gemm_weights, test_builder_gemm_op_kind |
| firmware/builder.py | ImageBuilder.depthwise | ValueError | 7 | image: test_builder_depthwise_needs_the_mesh, test_builder_depthwise_weights, test_builder_depthwise_mesh_size, test_builder_depthwise_pad_value, test_builder_depthwise_stride, test_builder_depthwise_odd, test_builder_depthwise_map_size |
| firmware/builder.py | _ints | ValueError | 1 | image: test_builder_integer_arguments |
| firmware/builder.py | _int_array | ValueError | 2 | image: test_builder_quant_shapes, test_builder_quant_values |
| firmware/image.py | Image.__post_init__ | ImageError | 3 | image: test_image_header_fields, test_image_layers_type, test_image_sections_blob_kinds |
| firmware/image.py | Layer.__post_init__ | ImageError | 3 | image: test_layer_desc_type, test_layer_enum_fields, test_layer_signed_fields, test_layer_unsigned_fields |
| firmware/image.py | with_a_crcs | ImageError | 2 | image: test_with_a_crcs_a_outside_image, test_with_a_crcs_config |
| firmware/image.py | decode | ImageError | 8 | image: test_decode_truncated_header, test_decode_magic, test_decode_format_version, test_decode_total_bytes, test_decode_crc, test_decode_section_reaches_past_image, test_decode_layer_count, test_decode_layer_fields |
| firmware/runtime.py | RunReport.raise_for_error | DeviceError | 1 | image: test_runtime_report_error |
| firmware/runtime.py | Runtime._check_range | ValueError | 1 | image: test_runtime_memory_range |
| firmware/runtime.py | Runtime._finish | DeviceError | 3 | image: test_runtime_status_after_done, test_runtime_error_register |
| firmware/runtime.py | Runtime.load_image | ImageError | 2 | image: test_runtime_load_image_refuses_invalid, test_runtime_load_image_too_short |
| firmware/runtime.py | Runtime.open | DeviceError | 1 | image: test_runtime_open_config_id |
| firmware/runtime.py | Runtime.run_image | DeviceError | 1 | image: test_runtime_stats_layer_index |
| firmware/runtime.py | Runtime.run_layer | ValueError | 1 | image: test_runtime_run_layer_missing_word |
| spec/config.py | AccelConfig.__post_init__ | ConfigError | 8 | config: test_config_field_must_be_int, test_config_fixed_fields, test_config_buffers_hold_two_halves, test_config_local_buffer_range, test_config_requant_lanes_range, test_config_dw_mesh_square, test_config_block_fits_the_buffers, test_config_buffer_holds_a_parameter_array |
| spec/config.py | AccelConfig._check_multiple | ConfigError | 1 | config: test_config_block_multiple |
| spec/config.py | AccelConfig._check_pow2 | ConfigError | 1 | config: test_config_power_of_two_fields |
| spec/config.py | AccelConfig._check_range | ConfigError | 1 | config: test_config_range_fields, test_config_from_json_range_errors_pass_through |
| spec/config.py | AccelConfig.from_dict | ConfigError | 2 | config: test_config_from_dict_unknown_fields, test_config_from_dict_names_the_defaulted_fields |
| spec/config.py | AccelConfig.from_dict | <re-raise> | 1 | config: test_config_from_dict_names_the_defaulted_fields (a rule broken by the given fields alone passes through unchanged) |
| spec/config.py | AccelConfig.from_json | ConfigError | 2 | config: test_config_from_json_must_be_object, test_config_from_json_must_be_json |
| spec/config.py | require_config | TypeError | 1 | config: test_config_entry_points_need_an_accel_config |
| spec/config.py | loads_unique.no_duplicates | duplicate | 1 | config: test_config_from_json_duplicate_field (raises the ConfigError from_json passes; parse_workload passes a ValueError, checked by the shapes area's workload duplicate-keys test) |
| spec/desc.py | GemmDescriptor.__post_init__ | ValueError | 1 | config: test_descriptor_field_u32 |
| spec/desc.py | depthwise_weight_words | ValueError | 1 | config: test_depthwise_weight_words_taps |
| spec/golden.py | _pair | ValueError | 1 | quant: test_conv2d_pairs |
| spec/golden.py | conv2d_int8 | ValueError | 7 | quant: test_conv2d_dtype, test_conv2d_rank, test_conv2d_pads, test_conv2d_groups, test_conv2d_channels_per_group, test_conv2d_empty, test_conv2d_kernel_fit |
| spec/golden.py | gemm_int8 | ValueError | 2 | quant: test_gemm_int8_shapes, test_gemm_int8_dtype |
| spec/golden.py | requantize | ValueError | 4 | quant: test_requantize_acc, test_requantize_int8_params, test_requantize_int8_param_kind, test_requantize_act_order |
| spec/golden.py | requantize.per_row | ValueError | 3 | quant: test_requantize_per_row, test_requantize_per_row_kind |
| spec/record.py | check_record | KeyError | 1 | config: test_check_record_missing_word |
| spec/record.py | check_record | ValueError | 1 | config: test_check_record_word_u32 |
| spec/record.py | layer_record | KeyError | 1 | config: test_layer_record_unknown_fields |
| planner/__main__.py | _cmd_report | ValueError | 2 | cli: test_planner_report_doc_markers, test_planner_report_out_directory |
| planner/__main__.py | _config | ValueError | 2 | cli: test_planner_preset, test_planner_config_file_range, test_planner_unreadable_file, test_planner_config_not_utf8 |
| planner/__main__.py | main | argparse --strategy | 1 | cli: test_planner_strategy_choice |
| planner/__main__.py | main | argparse add_mutually_exclusive_group | 1 | cli: test_planner_plan_needs_one_workload |
| planner/__main__.py | main | argparse add_subparsers | 1 | cli: test_planner_subcommand |
| planner/__main__.py | parse_conv | ValueError | 3 | cli: test_planner_conv_items, test_planner_conv_missing, test_planner_conv_shape_range, test_planner_conv_field_twice |
| planner/__main__.py | parse_gemm | ValueError | 1 | cli: test_planner_gemm_syntax, test_planner_gemm_range |
| planner/layout.py | _layout | ValueError | 1 | shapes: test_layout_names |
| planner/layout.py | group_base_bytes | ValueError | 1 | shapes: test_layout_group_base |
| planner/layout.py | to_padded | ValueError | 1 | shapes: test_layout_to_padded |
| planner/layout.py | weights_k_major | ValueError | 2 | shapes: test_layout_weights_shape, test_layout_weights_group |
| planner/offsets.py | ConvTables.from_bytes | ValueError | 1 | shapes: test_tables_from_bytes_lengths |
| planner/offsets.py | _as_range | ValueError | 1 | shapes: test_gather_b_ranges |
| planner/offsets.py | _check_range | ValueError | 1 | shapes: test_tables_base_past_32_bits, test_tables_field_ranges |
| planner/offsets.py | compile_tables | ValueError | 4 | shapes: test_tables_shape_type, test_tables_pixels, test_tables_row_width, test_tables_row_width_needs_batch_1_and_whole_rows |
| planner/offsets.py | gather_b | ValueError | 5 | shapes: test_gather_b_group_table, test_gather_b_last_flag, test_gather_b_lane_count, test_gather_b_fill_each_lane_once, test_gather_b_address |
| planner/zero_points.py | _shift | ValueError | 1 | quant: test_conv_integer_x_dtype, test_matmul_integer_dtype |
| planner/zero_points.py | _zero_point | ValueError | 2 | quant: test_conv_integer_zero_point_dtype, test_conv_integer_zero_point_shape, test_matmul_integer_zero_point_shape |
| planner/zero_points.py | exact_int | ValueError | 3 | quant: test_exact_int_integral, test_exact_int_dtype, test_exact_int_range |
| planner/zero_points.py | fold_conv_float | ValueError | 1 | quant: test_conv_bias_shape |
| planner/zero_points.py | fold_conv_integer | ValueError | 3 | quant: test_conv_integer_w_dtype, test_conv_integer_weight_span (the x_zero_point-must-be-scalar raise is unreachable: _zero_point refuses a non-scalar first, see test_conv_integer_zero_point_shape) |
| planner/zero_points.py | fold_matmul_integer | ValueError | 1 | quant: test_matmul_integer_shapes |
| planner/zero_points.py | resolve_conv_pads | ValueError | 2 | quant: test_conv_pads, test_conv_auto_pad |
| planner/requant.py | activation_bounds | ValueError | 3 | quant: test_activation_zero_point, test_activation_out_scale, test_activation_kind |
| planner/requant.py | quantize_multiplier | ValueError | 2 | quant: test_quantize_multiplier_scale, test_quantize_multiplier_shift |
| planner/shapes.py | ConvShape.__post_init__ | ValueError | 2 | shapes: test_conv_shape_groups_divide, test_conv_shape_kernel_must_fit |
| planner/shapes.py | ConvShape.gemm | ValueError | 1 | shapes: test_conv_shape_gemm_dims |
| planner/shapes.py | _check_int | ValueError | 1 | shapes: test_gemm_shape_dims, test_conv_shape_sizes, test_conv_shape_kernel_stride_dilation, test_conv_shape_pads, test_conv_shape_groups_range |
| planner/tiling.py | to_descriptor | ValueError | 2 | shapes: test_to_descriptor_plan_shape, test_to_descriptor_lists_hw_rules |
| planner/workload.py | _parse_layer | ValueError | 9 | shapes: test_workload_layer_must_be_object, test_workload_layer_name, test_workload_count, test_workload_gemm_keys, test_workload_gemm_shape, test_workload_conv_keys, test_workload_conv_shape, test_workload_conv_output_size_must_agree, test_workload_kind |
| planner/workload.py | parse_workload | ValueError | 2 | shapes: test_workload_top_level, test_workload_needs_layers |
| planner/workload.py | load_workload | ValueError | 3 | shapes: test_workload_file_errors_name_the_file |

Not raise sites, so not in the table: the rule lists that :func:`spec.desc.check`,
:func:`spec.record.check_record` and :func:`firmware.image.validate` *return* (their messages are
asserted rule by rule in tests/spec/test_desc.py, tests/firmware/test_image.py and the builder /
runtime tests here that surface them).
"""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: The audited sources (issue 9's config, shape, image and CLI validation paths).
FILES = ("spec/config.py", "spec/desc.py", "spec/record.py", "spec/golden.py", "planner/shapes.py",
         "planner/tiling.py", "planner/requant.py", "planner/zero_points.py", "planner/offsets.py",
         "planner/layout.py", "planner/workload.py", "planner/__main__.py", "firmware/image.py",
         "firmware/builder.py", "firmware/runtime.py", "firmware/__main__.py")
_ROW = re.compile(r"^\| (\S+) \| (\S+) \| ([^|]+?) \| (\d+) \| (.+) \|$")

Key = tuple[str, str, str]


def sites(path: str, source: str) -> collections.Counter[Key]:
    """(file, function, exception) -> count of raise statements and argparse validations
    (``add_argument`` with ``choices``/``type``/``required``; required subparsers and
    mutually exclusive groups). ``function`` is the dotted path of enclosing defs/classes."""
    out: collections.Counter[Key] = collections.Counter()

    def visit(node, stack):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, stack + [child.name])
                continue
            func = ".".join(stack) or "<module>"
            if isinstance(child, ast.Raise):
                exc = child.exc
                name = "<re-raise>" if exc is None else ast.unparse(
                    exc.func if isinstance(exc, ast.Call) else exc)
                out[(path, func, name)] += 1
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                kw = {k.arg: k.value for k in child.keywords}
                attr = child.func.attr
                if attr == "add_argument" and {"choices", "type", "required"} & set(kw):
                    first = child.args[0] if child.args else None
                    opt = first.value if isinstance(first, ast.Constant) else "?"
                    out[(path, func, f"argparse {opt}")] += 1
                elif attr in ("add_mutually_exclusive_group", "add_subparsers") and isinstance(
                        kw.get("required"), ast.Constant) and kw["required"].value:
                    out[(path, func, f"argparse {attr}")] += 1
            visit(child, stack)

    visit(ast.parse(source), [])
    return out


def table() -> dict[Key, tuple[int, str]]:
    rows = {}
    for line in __doc__.splitlines():
        m = _ROW.match(line)
        if m and m.group(1) != "file":
            key = (m.group(1), m.group(2), m.group(3))
            assert key not in rows, f"audit row {key} listed twice"
            rows[key] = (int(m.group(4)), m.group(5))
    return rows


def test_audit_table_matches_the_sources():
    found: collections.Counter[Key] = collections.Counter()
    for path in FILES:
        found.update(sites(path, (ROOT / path).read_text()))
    listed = table()
    missing = sorted(k for k in found if k not in listed)
    stale = sorted(k for k in listed if k not in found)
    recount = sorted((k, listed[k][0], n) for k, n in found.items()
                     if k in listed and listed[k][0] != n)
    assert not missing, f"raise sites not in the audit table (add a row and a test): {missing}"
    assert not stale, f"audit rows with no raise site left: {stale}"
    assert not recount, f"(row, listed, found) counts differ; new site needs a test: {recount}"


def test_audit_rows_name_existing_tests():
    defined = {}
    for path in HERE.glob("test_messages_*.py"):
        area = path.stem[len("test_messages_"):]
        defined[area] = {node.name for node in ast.walk(ast.parse(path.read_text()))
                         if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    for key, (_, tests) in table().items():
        area, sep, names = tests.partition(": ")
        assert sep, f"{key}: tests column must be 'area: test, ...' or 'internal: why'"
        if area == "internal":
            continue
        assert area in defined, f"{key}: no test_messages_{area}.py"
        for name in re.findall(r"\btest_\w+", names):
            assert name in defined[area], f"{key}: {name} is not in test_messages_{area}.py"


def test_audit_scanner_sees_new_sites():
    """The scanner itself: a raise added to a listed function changes its count, a raise in a
    new function is a new key, and argparse choices are found."""
    src = ("def f(x):\n    if x: raise ValueError('a')\n    raise ValueError('b')\n"
           "class C:\n    def g(self):\n        def h():\n            raise KeyError('k')\n"
           "def main(p):\n    p.add_argument('--x', choices=[1])\n    p.add_argument('y')\n")
    got = sites("m.py", src)
    assert got == {("m.py", "f", "ValueError"): 2, ("m.py", "C.g.h", "KeyError"): 1,
                   ("m.py", "main", "argparse --x"): 1}
