"""Generate the Grafana dashboards in this folder from Python (grafana-foundation-sdk, Grafana's typed SDK).

    python dashboards/generate.py            # rewrites dashboards/*.json
    python dashboards/generate.py --check    # exits 1 if a committed JSON differs from what this generates

The dashboards read the root's Prometheus metrics (docs/metrics.md) through a Prometheus datasource
chosen by the `datasource` variable; `telemetry dashboards push` provisions one (uid
`telemetry-prometheus`) and uploads the dashboards. Every PromQL expression here is run against a real
Prometheus by tests/test_prometheus_e2e.py; `expressions()` lists them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import table as table_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dash
from grafana_foundation_sdk.models import prometheus as prom

HERE = Path(__file__).resolve().parent
DATASOURCE_UID = "telemetry-prometheus"  # what `telemetry dashboards push` provisions
DS = dash.DataSourceRef(type_val="prometheus", uid="${datasource}")
JOB = 'job="$job"'  # a job's goodput families: the job's, every attempt together (no attempt label)
J = 'job="$job",attempt=~"$attempt"'  # every other per-job family: the attempt(s) chosen
FLEET = 'job="_fleet"'  # the fleet's hardware windows (docs/fleet.md): every host's devices, merged
RATE = "$__rate_interval"


def q(expr: str, legend: str = "", ref: str = "A", instant: bool = False, table: bool = False) -> prom_b.Dataquery:
    query = prom_b.Dataquery().expr(expr).ref_id(ref).datasource(DS).legend_format(legend or "__auto")
    if instant:
        query = query.instant()
    else:
        query = query.range()
    if table:
        query = query.format(prom.PromQueryFormat.TABLE)
    return query


def series(title: str, unit: str, *queries: prom_b.Dataquery, description: str = "", width: int = 12,
           height: int = 8, fill: float = 0.0) -> ts_b.Panel:
    panel = (ts_b.Panel().title(title).description(description).datasource(DS).unit(unit).span(width)
             .height(height).line_width(1).fill_opacity(fill).show_points(common.VisibilityMode.NEVER)
             .legend(common_b.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
                     .placement(common.LegendPlacement.BOTTOM).calcs([]))
             .tooltip(common_b.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                      .sort(common.SortOrder.NONE)))
    for query in queries:
        panel = panel.with_target(query)
    return panel


def single(title: str, unit: str, query: prom_b.Dataquery, description: str = "", width: int = 4,
           height: int = 4) -> stat_b.Panel:
    return (stat_b.Panel().title(title).description(description).datasource(DS).unit(unit).span(width)
            .height(height).with_target(query)
            .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
            .color_mode(common.BigValueColorMode.VALUE).graph_mode(common.BigValueGraphMode.AREA))


def prop(name: str, value: Any) -> dash.DynamicConfigValue:
    return dash.DynamicConfigValue(id_val=name, value=value)


def training_run() -> dash.Dashboard:
    datasource = (dash_b.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
                  .current(dash.VariableOption(selected=True, text=DATASOURCE_UID, value=DATASOURCE_UID)))
    job = (dash_b.QueryVariable("job").label("Job").datasource(DS)
           .query("label_values(telemetry_world_size, job)")
           .refresh(dash.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dash.VariableSort.ALPHABETICAL_ASC))
    # A job's live attempts (launches: docs/restarts.md), the one adopted as its latest first, so it is chosen by
    # default (not the highest number, which any process can claim); more may be chosen.
    attempt = (dash_b.QueryVariable("attempt").label("Attempt").datasource(DS)
               .query(f"query_result(sort_desc(telemetry_attempt_latest{{{JOB}}}))").regex('/attempt="([^"]+)"/')
               .multi(True).refresh(dash.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dash.VariableSort.DISABLED))

    def event_marks(kind: str, name: str, color: str) -> dash_b.AnnotationQuery:
        return (dash_b.AnnotationQuery().name(name).datasource(DS).enable(True).hide(False).icon_color(color)
                .expr(f'increase(telemetry_events_total{{{J},kind="{kind}"}}[1m]) > 0'))

    built = (
        dash_b.Dashboard("Training run")
        .uid("telemetry-training-run")
        .description("One training job as the telemetry root sees it: MFU, loss shape, per-rank step time, "
                     "hardware health and the telemetry's own health. Generated by dashboards/generate.py.")
        .tags(["telemetry", "training"])
        .editable()
        .tooltip(dash.DashboardCursorSync.CROSSHAIR)
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
        .with_variable(datasource)
        .with_variable(job)
        .with_variable(attempt)
        .annotation(event_marks("loss_spike", "Loss spikes", "red"))
        .annotation(event_marks("nonfinite", "NaN / Inf", "purple"))
        .annotation(event_marks("straggler", "Stragglers", "orange"))
        .annotation(event_marks("hang", "Hangs", "dark-red"))
        .annotation(event_marks("crash", "Crashes (ranks died)", "dark-purple"))
        .annotation(dash_b.AnnotationQuery().name("Telemetry events (root annotations)")
                    .datasource(dash.DataSourceRef(type_val="grafana", uid="-- Grafana --")).enable(True)
                    .hide(False).icon_color("yellow").type("tags")
                    .target(dash_b.AnnotationTarget().type("tags").tags(["telemetry"]).match_any(True)
                            .limit(500)))
        # ---------------------------------------------------------------- MFU
        .with_row(dash_b.Row("MFU"))
        .with_panel(series(
            "MFU across ranks", "percentunit",
            q(f'telemetry_mfu_ratio{{{J},stat="mean"}}', "mean", "A"),
            q(f'telemetry_mfu_ratio{{{J},stat="min"}}', "min (slowest rank)", "B"),
            q(f'telemetry_mfu_ratio{{{J},stat="max"}}', "max", "C"),
            description="Model FLOPs utilisation of the latest finalised step: mean over ranks, and the "
                        "lowest and highest rank.", width=16, height=8))
        .with_panel(single("MFU now (mean)", "percentunit", q(f'telemetry_mfu_ratio{{{J},stat="mean"}}'),
                           width=4, height=8))
        .with_panel(single("MFU drops open", "none",
                           q(f'telemetry_events_active{{{J},kind="mfu_drop"}}'), width=4, height=8))
        # ---------------------------------------------------------------- loss
        .with_row(dash_b.Row("Loss"))
        .with_panel(series(
            "Loss: mean with min-max band", "none",
            q(f'telemetry_loss{{{J},stat="max"}}', "max", "A"),
            q(f'telemetry_loss{{{J},stat="min"}}', "min", "B"),
            q(f'telemetry_loss{{{J},stat="mean"}}', "mean", "C"),
            description="Loss of each finalised step across ranks. The band is min to max; spikes and NaNs "
                        "are marked (annotations).", width=12, height=9)
            .override_by_name("max", [prop("custom.fillBelowTo", "min"), prop("custom.fillOpacity", 20),
                                      prop("custom.lineWidth", 0), prop("color", {"mode": "fixed",
                                                                                   "fixedColor": "blue"})])
            .override_by_name("min", [prop("custom.lineWidth", 0),
                                      prop("color", {"mode": "fixed", "fixedColor": "blue"})])
            .override_by_name("mean", [prop("custom.lineWidth", 2),
                                       prop("color", {"mode": "fixed", "fixedColor": "dark-blue"})]))
        .with_panel(series(
            "Gradient norm", "none",
            q(f'telemetry_grad_norm{{{J},stat="max"}}', "max", "A"),
            q(f'telemetry_grad_norm{{{J},stat="p50"}}', "p50", "B"),
            description="Gradient norm across ranks per finalised step.", width=8, height=9))
        .with_panel(single("NaN / Inf values (range)", "none",
                           q(f'sum(increase(telemetry_nonfinite_values_total{{{J}}}[$__range]))'),
                           description="Non-finite loss or grad_norm values logged over the dashboard's range.",
                           width=4, height=9))
        # ---------------------------------------------------------------- step time
        .with_row(dash_b.Row("Per-rank step time"))
        .with_panel(series(
            "Step time across ranks", "s",
            q(f'telemetry_step_time_seconds{{{J},stat="p50"}}', "p50", "A"),
            q(f'telemetry_step_time_seconds{{{J},stat="p90"}}', "p90", "B"),
            q(f'telemetry_step_time_seconds{{{J},stat="p99"}}', "p99", "C"),
            q(f'telemetry_step_time_seconds{{{J},stat="max"}}', "max", "D"),
            description="Per-rank step time of the latest finalised step: quantiles over ranks (t-digest) "
                        "and the exact max.", width=12, height=8))
        .with_panel(series(
            "Slowest rank", "none",
            q(f'telemetry_step_time_slowest_rank{{{J}}}', "slowest rank", "A"),
            description="The rank the others wait for in the latest finalised step: the one that waited least "
                        "in collectives (argmin of collective_wait) when the job logs it, else the last to "
                        "arrive (collective_arrival), else the largest step time.", width=6,
            height=8).draw_style(common.GraphDrawStyle.POINTS).decimals(0))
        .with_panel(table_b.Panel().title("Top 5 slowest ranks (latest step)").datasource(DS).span(6).height(8)
                    .show_header(True).cell_height(common.TableCellHeight.SM)
                    .description("Exact top-5 (value, rank) pairs of the latest finalised step: work_time (the "
                                 "ranks that worked longest) when the job logs collective_wait, else "
                                 "collective_arrival, else step_time.")
                    .with_target(q(f'telemetry_step_time_top_seconds{{{J}}}', "", "A", instant=True, table=True))
                    .with_target(q(f'telemetry_step_time_top_rank{{{J}}}', "", "B", instant=True, table=True))
                    .with_transformation(dash.DataTransformerConfig(id_val="merge", options={}))
                    .with_transformation(dash.DataTransformerConfig(id_val="organize", options={
                        "excludeByName": {"Time": True, "job": True, "attempt": True, "__name__": True,
                                          "instance": True},
                        "renameByName": {"position": "position", "Value #A": "seconds",
                                         "Value #B": "rank"},
                        "indexByName": {"position": 0, "Value #B": 1, "Value #A": 2}}))
                    .with_transformation(dash.DataTransformerConfig(id_val="sortBy", options={
                        "sort": [{"field": "position", "desc": False}]})))
        .with_panel(series(
            "Collective wait", "s",
            q(f'telemetry_step_collective_wait_seconds{{{J}}}', "per step: the median rank's wait", "A"),
            q(f'rate(telemetry_collective_wait_seconds_total{{{J}}}[{RATE}])', "waiting per second", "B"),
            q(f'rate(telemetry_collective_wait_rank_seconds_total{{{J}}}[{RATE}])',
              "rank-seconds waited per second (all ranks)", "C"),
            description="Seconds the median rank waits for the slowest in the latest step (p50 - min of "
                        "collective_wait, else max - p50 of collective_arrival or step_time), and the same "
                        "summed over time and over every rank.", width=12,
            height=8))
        .with_panel(series(
            "Data-loader wait", "s",
            q(f'telemetry_dataloader_wait_seconds{{{J},stat="max"}}', "max", "A"),
            q(f'telemetry_dataloader_wait_seconds{{{J},stat="p50"}}', "p50", "B"),
            description="Time ranks waited for their input pipeline in the latest finalised step.", width=8,
            height=8))
        .with_panel(single("Stragglers open", "none", q(f'telemetry_events_active{{{J},kind="straggler"}}'),
                           width=4, height=8))
        # ---------------------------------------------------------------- hardware
        .with_row(dash_b.Row("Hardware health"))
        .with_panel(series(
            "GPU temperature", "celsius",
            q(f'telemetry_gpu_temperature_celsius{{{J},stat="max"}}', "hottest GPU", "A"),
            q(f'telemetry_gpu_temperature_celsius{{{J},stat="mean"}}', "mean", "B"),
            description="Temperature of the job's GPUs (sources are the ranks using them).", width=8))
        .with_panel(series(
            "GPU power and clocks", "watt",
            q(f'telemetry_gpu_power_watts{{{J},stat="mean"}}', "mean power", "A"),
            q(f'telemetry_gpu_power_watts{{{J},stat="max"}}', "max power", "B"),
            q(f'telemetry_gpu_sm_clock_mhz{{{J},stat="min"}}', "lowest SM clock (MHz)", "C"),
            description="Power draw, and the lowest SM clock (a throttled GPU shows here).", width=8)
            .override_by_name("lowest SM clock (MHz)", [prop("unit", "rotmhz"),
                                                        prop("custom.axisPlacement", "right")]))
        .with_panel(series(
            "Throttling (GPUs throttled)", "none",
            q(f'telemetry_gpu_throttle_thermal{{{J},stat="mean"}} * ignoring(stat) telemetry_world_size{{{J}}}',
              "thermal", "A"),
            q(f'telemetry_gpu_throttle_power{{{J},stat="mean"}} * ignoring(stat) telemetry_world_size{{{J}}}',
              "power", "B"),
            description="How many of the job's GPUs report a thermal or power slowdown (mean of the 0/1 flag "
                        "times the world size).", width=8))
        .with_panel(series(
            "GPU errors (increase)", "none",
            q(f'sum(increase(telemetry_gpu_ecc_uncorrected_total{{{J}}}[{RATE}]))', "ECC uncorrected", "A"),
            q(f'sum(increase(telemetry_gpu_ecc_corrected_total{{{J}}}[{RATE}]))', "ECC corrected", "B"),
            q(f'sum(increase(telemetry_gpu_xid_errors_total{{{J}}}[{RATE}]))', "XID", "C"),
            q(f'sum(increase(telemetry_gpu_pcie_replay_total{{{J}}}[{RATE}]))', "PCIe replays", "D"),
            q(f'sum(increase(telemetry_gpu_nvlink_errors_total{{{J}}}[{RATE}]))', "NVLink errors", "E"),
            q(f'sum(increase(telemetry_gpu_remapped_rows_uncorrectable_total{{{J}}}[{RATE}]))',
              "rows remapped (uncorrectable)", "F"),
            description="ECC, XID, PCIe replay, NVLink and row-remap counters of the job's GPUs, summed over "
                        "its GPUs: increase per interval.", width=8))
        .with_panel(series(
            "Fleet: NIC / InfiniBand errors and ports", "none",
            q(f'sum(increase(telemetry_network_errors_total{{{FLEET}}}[{RATE}]))', "errors, whole fleet", "A"),
            q(f'telemetry_ib_port_active{{{FLEET},stat="min"}}', "lowest IB port active (0: a port down)", "B"),
            q(f'sum by (job) (increase(telemetry_network_errors_total{{job=~"_host:.*"}}[{RATE}]))',
              "{{job}} (per-host layout)", "C"),
            description="The fleet's hardware windows (job _fleet: every host's NICs and IB ports merged, "
                        "docs/fleet.md): error counters summed over the fleet and the lowest port state; hosts "
                        "still in the per-host layout (_host:<host>) each on their own. Which host and port: "
                        "GET /api/v1/hosts, or telemetry watch --hosts.", width=8))
        .with_panel(series(
            "Hardware events open", "none",
            q(f'telemetry_events_active{{{J},kind="hardware"}}', "open", "A"),
            description="Hardware rules firing for this job (events API: /api/v1/jobs/<job>/events).",
            width=8))
        # ---------------------------------------------------------------- telemetry health
        .with_row(dash_b.Row("Telemetry health"))
        .with_panel(series(
            "Ranks reporting vs world size", "none",
            q(f'telemetry_world_size{{{J}}}', "world size", "A"),
            q(f'telemetry_ranks_reporting{{{J}}}', "heartbeating", "B"),
            q(f'telemetry_step_ranks_missing{{{J}}}', "missing from the latest step", "C"),
            description="Ranks whose heartbeat reached the root in the latest second, against the world size.",
            width=8))
        .with_panel(series(
            "Ranks by liveness", "none",
            q(f'telemetry_ranks{{{J}}}', "{{state}}", "A"),
            description="Alive, stuck (alive, silent) and dead ranks as the agents see them.", width=8))
        .with_panel(series(
            "Dropped and late", "none",
            q(f'increase(telemetry_delivery_sdk_dropped_total[{RATE}])', "SDK values dropped", "A"),
            q(f'increase(telemetry_delivery_dropped_windows_total[{RATE}])', "windows dropped", "B"),
            q(f'increase(telemetry_delivery_late_total[{RATE}])', "late deltas (tree)", "C"),
            q(f'increase(telemetry_windows_late_total{{{J}}}[{RATE}])', "late deltas (this job)", "D"),
            q(f'increase(telemetry_windows_incomplete_total{{{J}}}[{RATE}])', "steps finalised incomplete",
              "E"),
            description="What the tree had to drop (bounded buffers), and what arrived after its deadline.",
            width=8))
        .with_panel(series(
            "Events open by kind", "none",
            q(f'sum by (kind) (telemetry_events_active{{{J}}})', "{{kind}}", "A"),
            description="Detector events open now (straggler, loss_spike, nonfinite, hang, mfu_drop, "
                        "dataloader_stall, hardware).", width=12))
        .with_panel(series(
            "Delivery repairs", "none",
            q(f'increase(telemetry_delivery_duplicates_total[{RATE}])', "duplicates absorbed", "A"),
            q(f'increase(telemetry_delivery_resent_total[{RATE}])', "units resent", "B"),
            q(f'increase(telemetry_delivery_rejected_overlaps_total[{RATE}])', "overlaps rejected", "C"),
            q(f'increase(telemetry_delivery_bad_inputs_total[{RATE}])', "bad inputs", "D"),
            description="Exactly-once delivery at work: resends after crashes, duplicates recognised.",
            width=12))
        # ---------------------------------------------------------------- goodput (docs/restarts.md)
        .with_row(dash_b.Row("Goodput and restarts"))
        .with_panel(single("Goodput", "percentunit", q(f'telemetry_goodput_ratio{{{JOB}}}'),
                           description="Productive step time over wall time since the job's first step, every "
                                       "attempt together: the effective training time ratio.", width=3, height=8))
        .with_panel(single("Time lost to restarts", "s",
                           q(f'sum by (job) (telemetry_goodput_seconds_total{{{JOB},kind=~"lost|restart_downtime"}})'),
                           description="Steps a later attempt ran again (lost) plus the time from each attempt's "
                                       "last step to the next attempt's first (restart downtime).", width=3,
                           height=8))
        .with_panel(single("Restarts", "none", q(f'telemetry_restarts_total{{{JOB}}}'),
                           description="Attempts of the job after its first.", width=3, height=8))
        .with_panel(single("Steps replayed", "none", q(f'telemetry_goodput_steps_replayed_total{{{JOB}}}'),
                           description="Steps run again by a later attempt (resumed from an earlier checkpoint).",
                           width=3, height=8))
        .with_panel(series(
            "Where the wall time went", "s",
            q(f'telemetry_goodput_seconds_total{{{JOB}}}', "{{kind}}", "A"),
            q(f'telemetry_goodput_replay_seconds{{{JOB}}}', "replaying (part of productive)", "B"),
            description="Seconds since the job's first step by what they went to (productive + lost + "
                        "restart_downtime = wall time), and the productive seconds spent replaying steps.",
            width=12))
    )
    model = built.build()
    for number, panel in enumerate(model.panels or [], start=1):  # unique, stable panel ids
        panel.id_val = number
    return model


DASHBOARDS = {"training-run.json": training_run}


def render(model: dash.Dashboard) -> str:
    return json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def expressions(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every Prometheus expression in a dashboard's JSON: panel targets,
    annotation queries, query variables (as written: label_values(...) included)."""
    found: list[tuple[str, str]] = []
    for panel in data.get("panels", []):
        for target in panel.get("targets", []) or []:
            if target.get("expr"):
                found.append((f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]))
        for inner in panel.get("panels", []) or []:
            for target in inner.get("targets", []) or []:
                if target.get("expr"):
                    found.append((f"panel {inner.get('title')!r} {target.get('refId')}", target["expr"]))
    for annotation in data.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            found.append((f"annotation {annotation.get('name')!r}", annotation["expr"]))
    for variable in data.get("templating", {}).get("list", []):
        query = variable.get("query")
        if variable.get("type") == "query" and query:
            found.append((f"variable {variable.get('name')!r}", query if isinstance(query, str) else query["query"]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed JSON; exit 1 if stale")
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write into [default: dashboards/]")
    args = parser.parse_args(argv)
    stale = []
    for name, make in DASHBOARDS.items():
        text = render(make())
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if args.out.resolve() == HERE.resolve():  # deploy/kubernetes/grafana-dashboards.yaml carries the same JSON
        configmap = [sys.executable, str(HERE.parent / "scripts" / "gen_dashboard_configmap.py")]
        if args.check and subprocess.run([*configmap, "--check"]).returncode != 0:
            stale.append("deploy/kubernetes/grafana-dashboards.yaml")
        elif not args.check:
            subprocess.run(configmap, check=True)
    if stale:
        print(f"stale (run python dashboards/generate.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
