"""Data: upload caches into the store, see what it holds, its coverage and pairing."""

from pathlib import Path

import duckdb
import streamlit as st

from perspective_app import shared
from pkps_core import views
from pkps_core.demo import data_dir
from pkps_core.records import RecordsError
from pkps_core.store import families
from pkps_core.uploads import UPLOAD_TYPES, read_uploads
from pkps_core.views.figures import coverage_figure, heatmap

PAGE_SIZE = 80

st.title("Data")

# ---------------------------------------------------------------------- upload
st.header("Upload")
st.caption(
    "Canonical CSV / TSV / Parquet (columns: docs/reference/input-schema.md) or files written by "
    "evaluation tools: Every Eval Ever samples, lm-evaluation-harness samples, Inspect logs "
    "(.eval or JSON), lighteval details (details_*.parquet); "
    "a .zip for folder formats (HELM run, AlpacaEval results). Several files are imported "
    "together: if any is invalid, nothing is stored."
)
upload_limit = st.get_option("server.maxUploadSize")
uploads = st.file_uploader(
    "Response caches", type=list(UPLOAD_TYPES), accept_multiple_files=True, key="data_upload"
)
st.caption(
    f"Up to {upload_limit} MB per file (the server's `maxUploadSize` in "
    "`.streamlit/config.toml`; larger caches: `python -m pkps_core ingest`)."
)
active = shared.active_path()
destinations = ["the active store", "a new store"]
destination = st.radio(
    "Add to",
    destinations,
    index=1 if shared.is_demo(active) else 0,
    horizontal=True,
    help="The demo store is synthetic; real data usually goes into its own store.",
)
with st.expander("Which score to import"):
    metric = st.text_input(
        "HELM / lighteval metric",
        key="data_metric",
        help="The per-sample metric that gives the score. Empty: the main metric HELM's "
        "schema names for the run's group, or lighteval's first metric; the import's notes "
        "say which was used.",
    )
    annotator = st.text_input(
        "AlpacaEval annotator",
        key="data_annotator",
        help="The annotator folder whose preferences give the score. Empty: "
        "weighted_alpaca_eval_gpt4_turbo when present, else the one there is.",
    )
percent_scores = st.checkbox(
    "Scores are percentages (0–100): divide them by 100",
    key="data_percent_scores",
    help="Scores must lie in [0, 1] (0/1 or a fraction); a file scored in percent is "
    "refused unless this is ticked.",
)
new_path = None
if destination == "a new store":
    default_name = views.import_store_name([f.name for f in uploads or []], data_dir())
    # a keyed widget ignores value= after its first run: follow a new default explicitly
    if st.session_state.get("data_new_store_follows") != default_name:
        st.session_state["data_new_store"] = default_name
        st.session_state["data_new_store_follows"] = default_name
    new_path = st.text_input(
        f"New store file (in the store folder {data_dir()})", key="data_new_store"
    )

if st.button("Import", type="primary", disabled=not uploads, key="data_import"):
    st.session_state.pop("last_import", None)
    with st.status("Importing…", expanded=True) as status:
        try:
            target, problem = (active, None) if new_path is None else shared.confine(new_path)
            if problem:
                raise RecordsError(problem)
            target = str(target)
            if Path(target).parent == data_dir():
                data_dir().mkdir(parents=True, exist_ok=True)  # the app's own folder
            problem = views.store_path_problem(target, create=True)
            if problem:
                raise RecordsError(problem)
            st.write("Reading and validating the files…")
            result = read_uploads(
                [(f.name, f.getvalue()) for f in uploads],
                metric=metric.strip() or None,
                annotator=annotator.strip() or None,
                percent_scores=percent_scores,
            )
            st.write(f"Storing {len(result.records):,} rows in one transaction…")
            store = shared.open_store(target)
            report = store.ingest(result.records, source=result.source, notes=result.warnings)
        except (RecordsError, duckdb.Error, OSError) as exc:
            # one line per problem, never a traceback (DuckDB: the target is not a store)
            message = str(exc) if isinstance(exc, RecordsError) else f"{target}: {exc}"
            status.update(label="Import failed: nothing was stored", state="error")
            st.session_state["last_import"] = {"error": views.error_lines(message)}
        else:
            shared.switch_store(target)
            families.reapply_families(store)  # edited families survive a re-import
            embed_note = None
            st.write("Embedding new texts for the kernels (first use only)…")
            try:
                shared.load_records(target, store.version)
            except RecordsError as exc:
                embed_note = str(exc)
            status.update(label="Import finished", state="complete", expanded=False)
            st.session_state["last_import"] = {
                "report": str(report),
                "files": result.per_file,
                "skipped": result.skipped,
                "warnings": result.warnings,
                "embed_note": embed_note,
            }
    st.rerun()

last = st.session_state.get("last_import")
if last and "error" in last:
    problems = last["error"]
    shared.alert(
        "error",
        "The upload is not valid, so nothing was stored. Fix the file and upload it again."
        if len(problems) == 1
        else f"{len(problems)} problems, so nothing was stored. Fix the files and upload "
        "them again.",
        "\n".join(problems),
    )
elif last:
    shared.alert("success", "Imported.", last["report"])
    shared.table(last["files"], hide_index=True)
    if last["skipped"]:
        shared.alert("warning", "Some items were skipped:", "\n".join(last["skipped"]))
    if last["warnings"]:
        shared.alert("info", "The importers noted:", "\n".join(last["warnings"]))
    if last["embed_note"]:
        shared.alert(
            "warning",
            "Stored, but the perspective space cannot use the whole store:",
            last["embed_note"],
        )

# ---------------------------------------------------------------------- overview
path = shared.active_path()
version = shared.active_store().version
summary = shared.store_summary(path, version)
st.header("Store overview")
columns = st.columns(6)
for column, key in zip(
    columns, ("models", "tasks", "families", "responses", "scored", "queries"), strict=True
):
    column.metric(key.capitalize(), f"{summary[key]:,}")
if summary["responses"] == 0:
    st.info("The store is empty: upload a cache above.")
    st.stop()

cells = shared.load_cells(path, version)
model_table = views.model_table(cells)
with st.expander(f"Models ({len(model_table)})"):
    shared.table(model_table, hide_index=True, width="stretch")
family_rows = families.family_table(shared.active_store())
st.caption("Families: " + families.derivation_note(family_rows))
# Said outside the table's expander and for as long as the store is at the saved version:
# the rerun after a save redraws the editor, and a message inside it was gone at once.
saved = st.session_state.get("families_saved")
if saved and saved[:2] == (path, version):
    st.success(f"Saved: {saved[2]} model(s) changed family.")
# a fixed label: one with the family count became a new, closed expander after a save
with st.expander("Families: see and edit", expanded=bool(saved and saved[:2] == (path, version))):
    st.caption(
        "Family holdout keeps a model's relatives out of its references, so families "
        "matter. Edit the family column and save; edits are stored with the store (table "
        "family_edits) and restored after later imports. suggested: the name's leading "
        "letters (gpt-3.5-turbo, gpt4_0613 → gpt); “Use the suggested families” applies it to the "
        "families of the prefix rule only."
    )
    edited = st.data_editor(
        family_rows,
        disabled=["model", "derived", "suggested"],
        column_config=shared.table_config(family_rows, hide_index=True),
        hide_index=True,
        width="stretch",
        key="data_family_editor",
    )
    save, suggest = st.columns(2)
    changes = families.editor_changes(family_rows, edited)
    if save.button("Save the families", disabled=not changes, key="data_save_families"):
        family_update = changes
    elif suggest.button("Use the suggested families", key="data_suggest_families"):
        family_update = families.suggested_update(family_rows)
    else:
        family_update = None
    if family_update is not None:
        try:
            n_changed = families.set_families(shared.active_store(), family_update)
        except RecordsError as exc:
            shared.alert("error", "The families were not saved.", str(exc))
        else:
            saved_at = shared.active_store().version
            st.session_state["families_saved"] = (path, saved_at, n_changed)
            st.session_state.pop("data_family_editor", None)
            st.rerun()
with st.expander("Ingest log"):
    shared.table(shared.active_store().ingest_log(), hide_index=True, width="stretch")

tasks = sorted(cells["task"].unique())
order_by = st.radio(
    "Order models by", views.MODEL_ORDERS, index=1, horizontal=True, key="data_order_by"
)
order = views.model_order(cells, order_by)
many = len(order) > PAGE_SIZE
family_of = model_table.set_index("model")["family"]


def page_of(models, label, key):
    """The models on the chosen page (all of them for a small store)."""
    if len(models) <= PAGE_SIZE:
        return list(models)
    n_pages = -(-len(models) // PAGE_SIZE)
    page = st.number_input(
        f"{label} page (of {n_pages}, {PAGE_SIZE} models each)", 1, n_pages, 1, key=key
    )
    return views.paginate(models, page, PAGE_SIZE)[0]


# ---------------------------------------------------------------------- coverage
st.header("Coverage")
st.caption(
    "Responses per model and task as a share of the task's largest cell (hover: the "
    "responses); grey cells have none."
)
coverage_rows = st.radio(
    "Rows",
    ["models", "families (share of models covered)"],
    index=1 if many else 0,
    horizontal=True,
    key="data_coverage_rows",
)
if coverage_rows == "models":
    shown = page_of(order, "Model", "data_coverage_page")
    figure, complete = coverage_figure(views.coverage_matrix(cells, shown, tasks))
    if complete:
        # a caption, not an alert: the import's own success box stays the page's only one
        st.caption(
            "Complete: every model shown answered as many queries of each task as the "
            "task's largest cell (every cell has the same share, 1)."
        )
else:
    matrix = views.family_coverage(cells, tasks)
    figure = heatmap(matrix, "Viridis", 0, 1, "share of models covered", ("task", "family"))
st.plotly_chart(figure, width="stretch", key="data_coverage_chart")

# ---------------------------------------------------------------------- pairedness
st.header("Pairedness")
st.caption(
    "ρ: the fraction of the row model's queries the column model also answered "
    "(1 = fully paired, 0 = no shared query; DKPS needs ρ > 0, PKPS does not)."
)
scope = st.selectbox("Queries", ["pooled over tasks", *tasks], key="data_pair_scope")
pairs = shared.load_pairedness(path, version, None if scope == "pooled over tasks" else scope)
pair_rows = st.radio(
    "Rows and columns",
    ["models", "families (mean ρ)"],
    index=1 if many else 0,
    horizontal=True,
    key="data_pair_rows",
)
if pair_rows == "models":
    rows = page_of(order, "Row", "data_pair_row_page")
    columns = page_of(order, "Column", "data_pair_col_page")
    matrix = views.pairedness_matrix(pairs, rows, columns)
    figure = heatmap(matrix, "Blues", 0, 1, "ρ (shared queries)", ("column model", "row model"))
else:
    matrix = views.family_pairedness(pairs, family_of)
    figure = heatmap(matrix, "Blues", 0, 1, "mean ρ", ("column family", "row family"))
st.plotly_chart(figure, width="stretch", key="data_pairedness_chart")
off_diagonal = pairs[pairs["model_a"] != pairs["model_b"]]["rho"]
if len(off_diagonal):
    st.caption(f"Mean ρ between different models: {off_diagonal.mean():.3f}")
