"""Run layers through SCALE-Sim; executed by the SCALE-Sim venv's Python, not the project's.

    <scalesim-venv>/bin/python bench/scalesim_driver.py SPEC.json OUT.json

Imports only the standard library and ``scalesim`` (SCALE-Sim 3 needs numpy < 2.4, which the
project's venv does not pin). ``SPEC.json`` is written by :mod:`bench.peer_scalesim`:
``{"workdir", "runs": [{"key", "config": {section: {key: value}}, "layers": [{"name", "kind":
"conv"|"gemm", "row": [topology CSV fields]}]}]}``. Each layer runs alone (one topology file per
layer), without traces; with ``"cache"`` (a directory) in the spec, a layer already run with
the same config is read back instead. ``OUT.json`` gets ``{key: [{"name", "total_cycles",
"total_cycles_incl_prefetch", "stall_cycles", "overall_util_pct", "mapping_efficiency_pct",
"compute_util_pct"} per layer]}``, rewritten after every layer so the caller can show progress.
"""

import configparser
import contextlib
import csv
import hashlib
import io
import json
import os
import sys

CONV_HEADER = ["Layer name", "IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width",
               "Channels", "Num Filter", "Strides"]
GEMM_HEADER = ["Layer", "M", "N", "K"]


def write_csv_row(path, header, row):
    # SCALE-Sim drops the last field of every row: rows end with a comma
    with open(path, "w") as f:
        f.write(", ".join(header) + ",\n")
        f.write(", ".join(str(x) for x in row) + ",\n")


def run_layer(config, layer, workdir):
    from scalesim.scale_sim import scalesim

    os.makedirs(workdir, exist_ok=True)
    cfg_path = os.path.join(workdir, "scale.cfg")
    parser = configparser.ConfigParser()
    parser.optionxform = str
    parser.read_dict(config)
    with open(cfg_path, "w") as f:
        parser.write(f)
    topo = os.path.join(workdir, "topology.csv")
    gemm = layer["kind"] == "gemm"
    write_csv_row(topo, GEMM_HEADER if gemm else CONV_HEADER, layer["row"])
    layout = os.path.join(workdir, "layout.csv")
    with open(layout, "w") as f:
        f.write("Layer name,\n")              # no custom layout: header only
    with contextlib.redirect_stdout(io.StringIO()):
        sim = scalesim(save_disk_space=True, verbose=False, config=cfg_path, topology=topo,
                       layout=layout, input_type_gemm=gemm)
        sim.run_scale(top_path=workdir)
    report = None
    for root, _, files in os.walk(workdir):
        if "COMPUTE_REPORT.csv" in files:
            report = os.path.join(root, "COMPUTE_REPORT.csv")
    if report is None:
        raise RuntimeError(f"SCALE-Sim wrote no COMPUTE_REPORT.csv under {workdir}")
    with open(report) as f:
        rows = [[x.strip() for x in row] for row in csv.reader(f)]
    head, values = rows[0], rows[1]
    col = {name: i for i, name in enumerate(head)}
    return {"name": layer["name"],
            "total_cycles": int(float(values[col["Total Cycles"]])),
            "total_cycles_incl_prefetch":
                int(float(values[col["Total Cycles (incl. prefetch)"]])),
            "stall_cycles": int(float(values[col["Stall Cycles"]])),
            "overall_util_pct": float(values[col["Overall Util %"]]),
            "mapping_efficiency_pct": float(values[col["Mapping Efficiency %"]]),
            "compute_util_pct": float(values[col["Compute Util %"]])}


def main(argv):
    spec_path, out_path = argv[1], argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    results = {}
    for run in spec["runs"]:
        results[run["key"]] = []
        for i, layer in enumerate(run["layers"]):
            workdir = os.path.join(spec["workdir"], run["key"], f"{i:02d}-{layer['name']}")
            cached = None
            if spec.get("cache"):
                key = json.dumps([run["config"]["architecture_presets"], run["config"]["layout"],
                                  run["config"]["run_presets"], layer["kind"], layer["row"][1:]],
                                 sort_keys=True)
                digest = hashlib.sha256(key.encode()).hexdigest()[:20]
                cached = os.path.join(spec["cache"], f"{digest}.json")
            if cached and os.path.exists(cached):
                with open(cached) as f:
                    result = {**json.load(f), "name": layer["name"]}
            else:
                result = run_layer(run["config"], layer, workdir)
                if cached:
                    os.makedirs(spec["cache"], exist_ok=True)
                    with open(cached, "w") as f:
                        json.dump(result, f)
            results[run["key"]].append(result)
            with open(out_path + ".tmp", "w") as f:
                json.dump(results, f, indent=1)
            os.replace(out_path + ".tmp", out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
