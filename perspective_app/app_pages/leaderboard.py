"""Leaderboard: every model × task of the store, observed or predicted, with intervals and ranks."""

import pandas as pd
import streamlit as st

from perspective_app import shared
from pkps_core.leaderboard import (
    KIND_MARK,
    KIND_WORDS,
    KINDS,
    LEVEL,
    stored_leaderboard,
    task_column,
)
from pkps_core.leaderboard_html import leaderboard_html
from pkps_core.outputs import table_bytes
from pkps_core.predictor import StaleFit
from pkps_core.views.leaderboard_figures import cell_map_figure, rank_figure

NEW_MODEL_PAGE = shared.NEW_MODEL_PAGE
HOLDOUT = "family"  # the New model page's default: the fitted predictor it reads


@st.cache_data(max_entries=8, show_spinner="Reading the leaderboard…")
def read_board(path: str, version: int):
    """The kept leaderboard of this store version, or None."""
    return stored_leaderboard(shared.open_store(path), compute=False, level=LEVEL, holdout=HOLDOUT)


def build_board(path: str, version: int, progress):
    """Place every model that has a cell not observed, and keep the table in the store."""
    store = shared.open_store(path)
    records = shared.load_records(path, version)
    predictor = None
    if needs_predictor(path, version) and shared.predictor_status(path, HOLDOUT) == "current":
        predictor = shared.load_predictor(path, version, HOLDOUT)
    board = stored_leaderboard(
        store,
        records=records,
        store_version=version,  # kept as of these records: stale if the store moved on
        predictor=predictor,
        progress=progress,
        holdout=HOLDOUT,
    )
    read_board.clear()
    return board


def needs_predictor(path: str, version: int) -> bool:
    """Whether the store's fitted predictor fills its cells that are not observed (on a
    thin store of graded scores the logit fill needs none)."""
    from pkps_core.leaderboard import cell_kinds, fill_method

    records = shared.load_records(path, version)
    kinds = cell_kinds(records)
    return bool((kinds["kind"] != "observed").any()) and fill_method(kinds, records) == "predictor"


def offer_fit(path: str, version: int, state: str) -> None:
    records = shared.load_records(path, version)
    seconds = max(5.0, 2.3e-3 * len(records))  # AlpacaEval: 74 s for 32k responses
    st.warning(
        "Some cells are not observed: they are filled by the store's fitted reference "
        f"predictor, and {'it is stale' if state == 'stale' else 'there is none yet'}."
    )
    st.caption(
        f"Fitting it takes about {seconds:.0f} s here ({len(records):,} responses) and is "
        "kept in the store; `python -m pkps_core fit --db STORE` does the same."
    )
    if st.button("Fit the reference predictor", key="leaderboard_fit"):
        progress = shared.progress_bar("Fitting the reference predictor…")
        shared.fit_predictor(path, version, HOLDOUT, progress)
        st.rerun()
    st.stop()


st.title("Leaderboard")
path, version = shared.require_data()
board = read_board(path, version)
if board is None:
    state = shared.predictor_status(path, HOLDOUT)
    try:
        if state != "current" and needs_predictor(path, version):
            offer_fit(path, version, state)  # every cell observed or the logit fill: none
        progress = shared.progress_bar("Placing the models…")
        board = build_board(path, version, progress)
        progress.empty()
    except StaleFit as exc:
        shared.alert("error", "The store's fitted predictor cannot be read.", str(exc))
        st.stop()

st.caption(
    f"{len(board.models)} models × {len(board.tasks)} tasks. Overall: the query-weighted "
    f"mean of a model's tasks with its {board.level:.0%} interval (the mean of its cells' "
    "interval ends); the rank interval is the best and worst rank that interval allows "
    f"against the others' overall scores. Cells not observed: {board.source}."
)
st.markdown(
    "**Legend** — "
    + " · ".join(f"`0.50{KIND_MARK[k]}` {KIND_WORDS[k]}" for k in KINDS)
    + ". Observed cells are plain, estimated ones marked `~` and shaded lighter, predicted "
    "ones marked `?` and greyed; hover a cell for its interval."
)

models = board.models
controls = st.columns([2, 2, 2])
families = sorted(models["family"].unique())
chosen_families = controls[0].multiselect("Families", families, key="leaderboard_families")
chosen_tasks = controls[1].multiselect("Tasks", board.tasks, key="leaderboard_tasks")
search = controls[2].text_input("Find a model", key="leaderboard_search").strip()

shown = models if not chosen_families else models[models["family"].isin(chosen_families)]
matches = [m for m in shown["model"] if search and search.lower() in str(m).lower()]
highlight = matches[0] if matches else None
if search and not matches:
    st.caption("No model matches the search.")
elif len(matches) > 1:
    st.caption(f"{len(matches)} models match; the first, {matches[0]!r}, is highlighted.")

tasks = chosen_tasks or board.tasks
wide_out = board.wide()  # once: the table, the map and the exports
wide = wide_out.set_index("model").loc[shown["model"]]
table = shown[["rank", "model", "family", "overall", "lower", "upper"]].copy()
table["rank interval"] = [
    f"{int(a)}–{int(b)}" for a, b in zip(shown["rank_lower"], shown["rank_upper"], strict=True)
]
table["observed"] = shown["observed_fraction"].to_numpy()
for task in tasks:
    name = task_column(task)
    table[task] = [
        f"{value:.3f}{KIND_MARK[kind]}" if value == value else f"—{KIND_MARK[kind]}"
        for value, kind in zip(wide[name], wide[f"{name} kind"], strict=True)
    ]
table = table.reset_index(drop=True)


def cell_css(value: float, kind: str) -> str:
    if value != value:  # NaN: nothing could predict the cell
        return "background-color: #ffffff; color: #999999"
    hue = f"hsl({int(120 * min(max(value, 0.0), 1.0))}, 60%, "
    if kind == "observed":
        return f"background-color: {hue}80%)"
    if kind == "estimated":
        return f"background-color: {hue}92%); color: #444444"
    return "background-color: #eeeeee; color: #777777"


def style(frame):
    """Cells coloured by score; estimated and predicted cells told apart; the highlight."""
    out = pd.DataFrame("", index=frame.index, columns=frame.columns)
    rows = wide.loc[frame["model"]]
    for task in tasks:
        name = task_column(task)
        values = rows[name].to_numpy(dtype=float)
        kinds = rows[f"{name} kind"].to_numpy(dtype=object)
        out[task] = [cell_css(v, k) for v, k in zip(values, kinds, strict=True)]
    hit = (frame["model"] == highlight).to_numpy()
    out.loc[hit, ["rank", "model", "family", "overall"]] = (
        "background-color: #ffe08a; font-weight: bold"
    )
    return out


styled = table.style.apply(style, axis=None).format(
    {"overall": "{:.3f}", "lower": "{:.3f}", "upper": "{:.3f}", "observed": "{:.0%}"}
)
event = shared.table(
    styled,
    hide_index=True,
    width="stretch",
    on_select="rerun",
    selection_mode="single-row",
    key="leaderboard_table",
)
rows = event.selection.rows if event is not None and hasattr(event, "selection") else []
if rows:
    picked = str(table["model"].iloc[rows[0]])
    st.session_state["new_model_pick"] = picked
    st.session_state["new_model_source"] = "From the store"
    st.switch_page(NEW_MODEL_PAGE)
st.caption("Select a row to open that model on the New model page.")

st.subheader("Cells")
st.plotly_chart(
    cell_map_figure(wide.loc[table["model"]], tasks), width="stretch", key="leaderboard_cells"
)

st.subheader("Ranks")
st.plotly_chart(
    rank_figure(shown, highlight, board.level), width="stretch", key="leaderboard_ranks"
)

st.subheader("Export")
buttons = st.columns(3)
shared.download_button(
    "CSV",
    lambda: table_bytes(wide_out, "csv"),
    "leaderboard.csv",
    where=buttons[0],
    key="leaderboard_csv",
)
shared.download_button(
    "Parquet",
    lambda: table_bytes(wide_out, "parquet"),
    "leaderboard.parquet",
    where=buttons[1],
    key="leaderboard_parquet",
)
shared.download_button(
    "HTML",
    lambda: leaderboard_html(board).encode("utf-8"),
    "leaderboard.html",
    where=buttons[2],
    key="leaderboard_html",
)
