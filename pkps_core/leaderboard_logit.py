"""An additive model of a store's scored responses on the logit scale, for the leaderboard.

On a sparse store every model is thin: a few responses in a few tasks, and no cell holds a
trusted full-task score. The mean of a model's raw scores ranks the models poorly when the
scores are a judge's graded probabilities (AlpacaEval's are mostly near 0 with rare wins
near 1: the mean of ten is ruled by one or two wins); the same responses' mean *logit*
ranks them well (``docs/results/leaderboard.md``). :class:`LogitAdditive` fits

    logit(score[model, query]) = ability[model] + difficulty[task] + q[query] + residual

on every scored response of the store and maps back to the score scale:

- **graded** scores (some strictly inside (0, 1)): least squares on the clipped logit
  (clipped at half the smallest distance of a score from 0 or 1, at least ``1e-9``). The
  query effect ``q`` is shrunk (a random effect whose variance is estimated from pairs of
  models that answered the same query) and, for a model, estimated from the *other*
  models' responses only, so a query only it answered does not absorb its own residual.
  The expected score of a query of the task is the mean of
  ``sigmoid(ability + difficulty + r)`` over the residuals ``r`` of the ability-and-task
  fit (Duan's smearing, widened for the parameters fitted): a model's full-task score is
  not ``sigmoid`` of its mean logit;
- **binary** scores (0/1 only): a logistic model with ability and difficulty, a weak normal
  prior (precision ``ridge``) keeping all-correct and all-wrong models finite.

A cell's full-task score keeps its scored responses as observed and predicts the task's
other queries: ``(sum of its scores + unanswered queries × expected score) / task queries``.

**Intervals.** A bootstrap over responses, resampled within each (model, task) cell, refits
the whole model (abilities, difficulties, query effects, residuals) ``n_boot`` times; a
cell's observed responses stay as observed. A cell's interval is
``logit(value) ± t · sd`` mapped back, ``sd`` the bootstrap's standard deviation of the
cell's logit value widened by ``sqrt(n / (n - 1))`` and ``t`` the Student quantile at
``n - 1`` degrees of freedom, ``n`` the model's scored responses: the small-sample
correction of a mean of ``n`` values (a bootstrap's spread of a mean of 8 responses is
too narrow by both). The resampling carries what all models share (the residuals' tail,
the difficulties) as well as each model's own noise.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import expit, logit
from scipy.stats import t as student_t

__all__ = ["LogitAdditive"]

MIN_EPS = 1e-9
SMEAR_POINTS = 400
MAX_ITER = 200
TOLERANCE = 1e-7
MIN_SHRINKAGE = 0.25


def _means(groups, values, n_groups, ridge=0.0):
    counts = np.bincount(groups, minlength=n_groups).astype(float)
    sums = np.bincount(groups, weights=values, minlength=n_groups)
    return sums / np.maximum(counts + ridge, 1e-12)


def _logistic_effect(y, offset, groups, n_groups, ridge, start):
    """Per group, the penalised logistic effect ``e`` of ``y ~ offset + e[group]``."""
    effect = start.copy()
    for _ in range(25):
        p = expit(offset + effect[groups])
        gradient = np.bincount(groups, weights=y - p, minlength=n_groups) - ridge * effect
        information = np.bincount(groups, weights=p * (1 - p), minlength=n_groups) + ridge
        step = np.clip(gradient / information, -5.0, 5.0)
        effect = effect + step
        if np.max(np.abs(step)) < 1e-8:
            break
    return effect


def query_shrinkage(residuals, query, n_queries) -> float | None:
    """``sigma_e^2 / tau^2`` of the query effect (method of moments: the mean product of
    two models' residuals on one query estimates ``tau^2``), or None when no query was
    answered twice or the estimate is not positive."""
    counts = np.bincount(query, minlength=n_queries).astype(float)
    sums = np.bincount(query, weights=residuals, minlength=n_queries)
    squares = np.bincount(query, weights=residuals**2, minlength=n_queries)
    pairs = counts * (counts - 1)
    if pairs.sum() <= 0:
        return None
    tau2 = float((sums**2 - squares).sum() / pairs.sum())
    total = float(np.mean(residuals**2))
    if tau2 <= 0 or total <= tau2:
        return None
    return max(MIN_SHRINKAGE, (total - tau2) / tau2)


def _solve(y, model, task, query, shape, kind, shrinkage, ridge):
    """Abilities, difficulties and the smearing residuals (quantiles) of one fit."""
    n_m, n_t, n_q = shape
    ability = np.zeros(n_m)
    difficulty = np.zeros(n_t)
    if kind == "binary":
        for _ in range(MAX_ITER):
            old = np.concatenate([ability, difficulty])
            difficulty = _logistic_effect(y, ability[model], task, n_t, ridge, difficulty)
            ability = _logistic_effect(y, difficulty[task], model, n_m, ridge, ability)
            if np.max(np.abs(np.concatenate([ability, difficulty]) - old)) < TOLERANCE:
                break
        return ability, difficulty, np.zeros(1)
    effect = np.zeros(len(y))  # each row's query effect, from the other models' rows
    for _ in range(MAX_ITER):
        old = np.concatenate([ability, difficulty])
        difficulty = _means(task, y - ability[model] - effect, n_t)
        ability = _means(model, y - difficulty[task] - effect, n_m)
        if shrinkage is not None:
            residual = y - ability[model] - difficulty[task]
            sums = np.bincount(query, weights=residual, minlength=n_q)
            counts = np.bincount(query, minlength=n_q)
            effect = (sums[query] - residual) / (counts[query] - 1 + shrinkage)
        if np.max(np.abs(np.concatenate([ability, difficulty]) - old)) < TOLERANCE:
            break
    residual = y - ability[model] - difficulty[task]
    dof = max(len(y) - n_m - n_t + 1, 1)
    residual = residual * np.sqrt(len(y) / dof)
    points = min(SMEAR_POINTS, len(residual))
    smear = np.quantile(residual, (np.arange(points) + 0.5) / points)
    return ability, difficulty, smear


class LogitAdditive:
    """``logit(score) = ability[model] + difficulty[task] (+ query)`` on scored responses.

    Parameters
    ----------
    level : float, default=0.9
        Coverage of the intervals.
    n_boot : int, default=200
        Bootstrap refits (responses resampled within each cell) for the intervals.
    ridge : float, default=0.25
        Prior precision of the effects in the binary (logistic) model.
    random_state : int, default=0

    Attributes
    ----------
    kind_ : {"graded", "binary"}
    eps_ : float
        Clipping of graded scores before the logit (NaN when binary).
    models_, tasks_ : ndarray of str
        The models and tasks with scored responses.
    ability_ : Series
        Per model.
    difficulty_ : Series
        Per task (the intercept included).
    shrinkage_ : float or None
        ``sigma_e^2 / tau^2`` of the query effect (None: no query effect fitted).
    smear_ : ndarray
        Residual quantiles the expected score averages over (``[0.0]`` when binary).
    boot_ability_, boot_difficulty_, boot_smear_ : ndarray
        The bootstrap refits' (``n_boot`` rows).
    n_scored_ : Series
        Scored responses per model.
    """

    def __init__(self, level=0.9, n_boot=200, ridge=0.25, random_state=0):
        self.level = level
        self.n_boot = n_boot
        self.ridge = ridge
        self.random_state = random_state

    def fit(self, records: pd.DataFrame) -> LogitAdditive:
        """Fit on the rows of ``records`` with a score (model, task, query_id, score)."""
        if "score" not in records.columns or not records["score"].notna().any():
            raise ValueError("no scored responses: the logit model needs scores")
        scored = records[records["score"].notna()]
        score = scored["score"].to_numpy(dtype=float).clip(0.0, 1.0)
        self.models_, model = np.unique(scored["model"].astype(str), return_inverse=True)
        self.tasks_, task = np.unique(scored["task"].astype(str), return_inverse=True)
        keys = scored["task"].astype(str) + "\x1f" + scored["query_id"].astype(str)
        _, query = np.unique(keys.to_numpy(dtype=str), return_inverse=True)
        shape = (len(self.models_), len(self.tasks_), int(query.max()) + 1)
        inner = score[(score > 0) & (score < 1)]
        if len(inner):
            self.kind_ = "graded"
            self.eps_ = max(MIN_EPS, 0.5 * float(np.minimum(inner, 1 - inner).min()))
            y = logit(score.clip(self.eps_, 1 - self.eps_))
            first = _solve(y, model, task, query, shape, "graded", None, 0.0)
            residual = y - first[0][model] - first[1][task]
            self.shrinkage_ = query_shrinkage(residual, query, shape[2])
        else:
            self.kind_ = "binary"
            self.eps_ = float("nan")
            y = score
            self.shrinkage_ = None
        args = (shape, self.kind_, self.shrinkage_, self.ridge)
        ability, difficulty, self.smear_ = _solve(y, model, task, query, *args)
        self.ability_ = pd.Series(ability, index=self.models_)
        self.difficulty_ = pd.Series(difficulty, index=self.tasks_)
        self.n_scored_ = pd.Series(np.bincount(model, minlength=shape[0]), index=self.models_)
        self._bootstrap(y, model, task, query, args)
        return self

    def _bootstrap(self, y, model, task, query, args) -> None:
        """Refit on responses resampled within each (model, task) cell."""
        rng = np.random.default_rng(self.random_state)
        cell = model * args[0][1] + task
        order = np.argsort(cell, kind="stable")
        sizes = np.bincount(cell)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        in_order = cell[order]
        abilities, difficulties, smears = [], [], []
        for _ in range(self.n_boot):
            draw = starts[in_order] + (rng.random(len(y)) * sizes[in_order]).astype(int)
            pick = order[draw]
            a, d, s = _solve(y[pick], model[pick], task[pick], query[pick], *args)
            abilities.append(a)
            difficulties.append(d)
            smears.append(np.quantile(s, (np.arange(len(self.smear_)) + 0.5) / len(self.smear_)))
        self.boot_ability_ = np.array(abilities)
        self.boot_difficulty_ = np.array(difficulties)
        self.boot_smear_ = np.array(smears)

    def expected(self, ability, difficulty, smear) -> np.ndarray:
        """Expected score of one query: ``mean(sigmoid(ability + difficulty + smear))``
        over the last axis (arrays broadcast: ability ``(..., 1)``)."""
        return expit(ability + difficulty + smear).mean(axis=-1)

    def cells(self, cells: pd.DataFrame) -> pd.DataFrame:
        """Fill ``cells`` (columns model, task, task_queries, n_scored, sample_score).

        Returns ``value``, ``lower``, ``upper`` per row, NaN where the model or the task
        has no scored response.
        """
        out = pd.DataFrame(np.nan, index=cells.index, columns=["value", "lower", "upper"])
        m_pos = pd.Series(np.arange(len(self.models_)), index=self.models_)
        t_pos = pd.Series(np.arange(len(self.tasks_)), index=self.tasks_)
        known = cells["model"].isin(m_pos.index) & cells["task"].isin(t_pos.index)
        for task, part in cells[known].groupby("task", sort=False):
            m = m_pos.reindex(part["model"]).to_numpy()
            t = int(t_pos[task])
            queries = part["task_queries"].to_numpy(dtype=float)
            answered = np.minimum(part["n_scored"].to_numpy(dtype=float), queries)
            observed = np.nan_to_num(part["sample_score"].to_numpy(dtype=float)) * answered
            rest = queries - answered
            point = self.expected(
                self.ability_.to_numpy()[m][:, None], self.difficulty_.iloc[t], self.smear_
            )
            boot = self.expected(
                self.boot_ability_[:, m][:, :, None],
                self.boot_difficulty_[:, t][:, None, None],
                self.boot_smear_[:, None, :],
            )  # (n_boot, models)
            value = (observed + rest * point) / queries
            values = (observed + rest * boot) / queries
            n = self.n_scored_.to_numpy()[m].astype(float)
            lo_clip = 1e-12
            sd = logit(values.clip(lo_clip, 1 - lo_clip)).std(axis=0, ddof=1)
            sd = sd * np.sqrt(n / np.maximum(n - 1, 1))
            quantile = student_t.ppf(0.5 + self.level / 2, np.maximum(n - 1, 1))
            centre = logit(np.clip(value, lo_clip, 1 - lo_clip))
            out.loc[part.index, "value"] = value
            out.loc[part.index, "lower"] = expit(centre - quantile * sd)
            out.loc[part.index, "upper"] = expit(centre + quantile * sd)
        return out


SOURCE = "the additive logit model of the store's scored responses"


def logit_cells(
    records: pd.DataFrame, cells: pd.DataFrame, rows: np.ndarray, level: float
) -> pd.DataFrame:
    """``value``, ``lower``, ``upper``, ``note`` of the ``rows`` (a boolean mask) of the
    leaderboard's ``cells`` from a :class:`LogitAdditive` fitted on ``records``; NaN (note
    empty) where the model or the task has no scored response."""
    out = pd.DataFrame(np.nan, index=cells.index, columns=["value", "lower", "upper"])
    out["note"] = ""
    if not rows.any():
        return out
    model = LogitAdditive(level=level).fit(records)
    filled = model.cells(cells[rows])
    out.loc[rows, ["value", "lower", "upper"]] = filled.to_numpy()
    note = f"logit model ({model.kind_} scores)"
    out.loc[rows, "note"] = np.where(filled["value"].notna(), note, "")
    return out
