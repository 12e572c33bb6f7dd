"""Experiments: how accurate is each method on this cache, measured the papers' way.

A thin page over :mod:`pkps_core.protocols`: choose a protocol, its levers and the seeds;
each seed runs as one cached call (keyed by store path, store version and every setting),
so the progress bar advances per seed and a rerun with the same inputs is instant. The
store is the app's active store (:mod:`perspective_app.shared`), as on every page. The
new-model protocol also shows its overall-score and interval tables
(:func:`pkps_core.views.new_model_tables`).
"""

from __future__ import annotations

import json
import time

import pandas as pd
import streamlit as st

from perspective_app import shared
from pkps_core import protocols, views
from pkps_core.predict import METHODS
from pkps_core.views import experiment_figures
from pkps_core.views.widths import cell_width

LEVER_CHOICES = {
    "budget": [1, 2, 4, 8, 16, 32],
    "rho": [0.0, 0.25, 0.5, 1.0],
    "cohort": ["full", 10, 20, 40],
    "n_tasks": ["full", 2, 4, 8, 12],
    "p_task": [0.2, 0.35, 0.5, 0.7, 0.9, 1.0],
    "p_query": [0.1, 0.25, 0.5, 0.75, 1.0],
    "core_set": [10, 25, 50, 100],
    "mode": ["scored", "responses-only"],
}
DEFAULTS = {
    "query-efficiency": {"budget": [1, 2, 4, 8], "rho": [0.0], "cohort": ["full"], "p_task": [1.0]},
    "completion": {"cohort": ["full"], "n_tasks": ["full"], "p_task": [0.5], "p_query": [0.5]},
    "interpolation": {"core_set": [50]},
    "extrapolation": {"core_set": [50]},
    "new-model": {"budget": [1, 2, 4, 8, 16], "mode": ["scored", "responses-only"]},
}
# Keyword of protocols.run_protocol for each lever.
ARGUMENTS = {
    "budget": "budgets",
    "rho": "rhos",
    "cohort": "cohorts",
    "n_tasks": "n_tasks",
    "p_task": "p_tasks",
    "p_query": "p_queries",
    "core_set": "core_sets",
    "mode": "modes",
}


@st.cache_resource(max_entries=2, show_spinner="Preparing the responses for the sweeps…")
def sweep_records(path: str, version: int) -> pd.DataFrame:
    """The store's records with embeddings, validated once for every sweep."""
    return protocols.prepare_records(shared.load_records(path, version))


@st.cache_data(max_entries=256, show_spinner=False)
def run_seed(
    path: str, version: int, protocol: str, settings: str, seed: int, _progress=None
) -> pd.DataFrame:
    """The long results of one seed (``settings``: JSON of levers, methods, target share);
    ``_progress(fraction, message)`` hears of each setting done (not part of the key)."""
    options = json.loads(settings)
    levers = {
        ARGUMENTS[name]: [None if v == "full" else v for v in values]
        for name, values in options["levers"].items()
    }
    if "target_share" in options:
        levers["target_share"] = options["target_share"]
    result = protocols.run_protocol(
        sweep_records(path, version),
        protocol,
        seeds=[seed],
        methods=options["methods"],
        progress=_progress,
        **levers,
    )
    return result.long


def lever_inputs(protocol: str) -> dict[str, list]:
    chosen = {}
    # two levers a row: four in one row left each list too narrow for its chips
    levers = protocols.LEVERS[protocol]
    columns = [column for _ in range(0, len(levers), 2) for column in st.columns(2)]
    for column, lever in zip(columns, levers, strict=False):
        label, help_text = views.LEVER_LABELS[lever]
        chosen[lever] = column.multiselect(
            label,
            LEVER_CHOICES[lever],
            help=f"{help_text} (`{lever}` in the tables and the export)",
            default=DEFAULTS[protocol][lever],
            key=f"exp_{protocol}_{lever}",
        )
    return chosen


def mae_chart(result: protocols.ProtocolResult) -> None:
    """MAE against a swept setting (a line per method), or per method when nothing is swept."""
    swept = experiment_figures.swept_levers(result)
    x = (
        st.selectbox("Plot against", swept, format_func=views.lever_label, key="exp_x_lever")
        if len(swept) > 1
        else None
    )
    figure = experiment_figures.mae_figure(result, x)
    st.plotly_chart(figure, width="stretch", key="exp_mae_chart")


def improvement_chart(result: protocols.ProtocolResult) -> None:
    comparator = protocols.COMPARATORS[result.protocol][0]
    gains = experiment_figures.gain_frame(result, comparator)
    if not len(gains):
        return
    st.subheader(f"Per-cell improvement over {comparator}")
    st.caption(f"abs. error of {comparator} minus that of the method; above 0 the method wins.")
    figure = experiment_figures.improvement_figure(gains, comparator, result.levers)
    st.plotly_chart(figure, width="stretch", key="exp_gain_chart")


def lever_table(table: pd.DataFrame, protocol: str) -> None:
    """A levers × methods table; the new-model protocol's with a row per method and a
    column per budget (its nine methods across were wider than the page), every row shown."""
    if protocol == "new-model":
        shared.table(views.methods_as_rows(table), height="content")
    else:
        shared.table(table)


def similarity_chart(result: protocols.ProtocolResult) -> None:
    points = result.long.dropna(subset=["similarity", "normalised_gap"])
    st.subheader("Model similarity to the sources vs normalised gap")
    if not len(points):
        st.caption("Similarity is defined on binary tasks only; this cache has none.")
        return
    figure = experiment_figures.similarity_figure(points)
    st.plotly_chart(figure, width="stretch", key="exp_similarity_chart")
    shared.table(result.correlations, hide_index=True)


st.title("Experiments")
st.caption(
    "Mask this cache the way the papers do and measure each method against the full-cache "
    "scores: query efficiency (m queries per cell), completion (hidden cells), the "
    "interpolation / extrapolation splits, and new-model (complete references, new models "
    "that answered m queries per task, scored or not yet judged)."
)
path = shared.active_path()
version = shared.active_store().version

protocol = st.selectbox("Protocol", protocols.PROTOCOLS, key="exp_protocol")
with st.form("exp_form"):
    levers = lever_inputs(protocol)
    extra = {}
    if protocol == "new-model":
        extra["target_share"] = st.slider(
            "Share of the families drawn as new models (targets)",
            min_value=0.05,
            max_value=0.75,
            value=0.25,
            step=0.05,
            key="exp_new-model_target_share",
        )
    left, right = st.columns([3, 1])
    methods = left.multiselect(
        "Methods",
        list(METHODS),
        default=list(protocols.DEFAULT_METHODS[protocol]),
        key=f"exp_{protocol}_methods",
    )
    n_seeds = right.number_input("Seeds", min_value=1, max_value=64, value=4, key="exp_seeds")
    submitted = st.form_submit_button("Run", type="primary")

if submitted:
    if not methods or not all(levers.values()):
        st.error("Choose at least one method and one value per lever.")
        st.stop()
    notes = []
    if "budget" in levers:
        levers["budget"], notes = views.budget_check(
            shared.load_cells(path, version), levers["budget"]
        )
        if not levers["budget"]:
            st.error(" ".join(notes) or "No budget fits this cache.")
            st.stop()
    st.session_state["experiment_run"] = {
        "notes": notes,
        "protocol": protocol,
        "settings": json.dumps({"levers": levers, "methods": methods, **extra}, sort_keys=True),
        "seeds": int(n_seeds),
    }

run = st.session_state.get("experiment_run")
if run is None or run["protocol"] != protocol:
    st.info("Choose the levers and press Run.")
    st.stop()

for note in run.get("notes", []):
    st.info(note)
n_seeds = run["seeds"]
bar = st.progress(0.0, text=f"Seed 1 of {n_seeds}…")
longs = []
started = time.monotonic()
within = {"fraction": 0.0}  # the running seed's share of its settings done


def heard(fraction: float, message: str) -> None:
    within["fraction"] = fraction  # the sweep's thread: no Streamlit call here


def poll(seed: int) -> None:
    # settings and seeds cost about alike: the pace so far estimates the rest
    done = min(1.0, (seed + within["fraction"]) / n_seeds)
    left = shared.remaining_text(done, time.monotonic() - started)
    bar.progress(done, text=f"Seed {seed + 1} of {n_seeds}" + (f"; {left}" if left else "…"))


try:
    for seed in range(n_seeds):
        within["fraction"] = 0.0
        longs.append(
            shared.run_in_thread(
                lambda seed=seed: run_seed(
                    path, version, run["protocol"], run["settings"], seed, _progress=heard
                ),
                lambda seed=seed: poll(seed),
            )
        )
except ValueError as error:
    bar.empty()
    st.error(f"The sweep could not run: {error}")
    st.stop()
bar.empty()

result = protocols.combine_results(run["protocol"], longs)
if not len(result.long):
    st.warning("No target cells at these settings (e.g. full coverage leaves nothing hidden).")
    st.stop()

st.subheader("MAE per method")
mae_chart(result)
lever_table(
    protocols.format_summary(result.summary, result.levers, views.PAGE_DIGITS), result.protocol
)
st.caption(
    f"MAE ± SEM (score units): {protocols.MAE_AVERAGING} (the long results' CSV). "
    "Settings: "
    + "; ".join(f"`{lever}` = {views.lever_label(lever).lower()}" for lever in result.levers)
)
blanks = views.blank_cells_table(result.long)
if len(blanks):
    st.caption(
        "Why some cells have no error (a method with none at a setting shows “—” above and "
        "no point in the chart); the CSV's `note` column says it for every row:"
    )
    # a few rows whose reasons are read whole: the column as wide as its longest reason
    why_width = cell_width(blanks["why"].astype(str))
    shared.table(
        blanks, hide_index=True, width="stretch", column_config={"why": {"width": why_width}}
    )
improvement_chart(result)
if "similarity" in result.long.columns:
    similarity_chart(result)
for title, (caption, table) in views.new_model_tables(result).items():
    st.subheader(title)
    st.caption(caption)
    lever_table(table, result.protocol)
st.subheader("Wilcoxon signed-rank tests")
st.caption(
    "Two-sided, on per-task mean error differences (method − comparator), at every "
    "setting (the papers' table is the smallest budget's rows); negative mean_diff and "
    "frac_cells_better above 0.5 favour the method."
)
shared.table(views.all_point_tests(result), hide_index=True)
downloads = st.columns(2)
shared.download_button(
    "Download the long results (CSV)",
    lambda: views.export_bytes(result.long, "csv"),
    f"pkps-{run['protocol']}.csv",
    where=downloads[0],
    help="One row per seed, setting, method and target cell, with `note` (why a cell has no "
    "error) and `mae_weight` (its weight in the MAE table).",
)
shared.download_button(
    "Download the MAE table (CSV)",
    lambda: views.export_bytes(views.summary_export(result), "csv"),
    f"pkps-{run['protocol']}-mae.csv",
    where=downloads[1],
    help="The MAE table's numbers unrounded, with the seeds, cells and share of cells behind each.",
)
