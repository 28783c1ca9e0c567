"""Tuning: the space of a kernel's `params` / `where` lines, the strategies that choose what to measure next, and
the report. No device and no MCP here: a worker's `tune` job (runner/tune_job.py) measures a batch of
configurations; `run_tuning` asks a strategy for batches and tells it what each configuration measured.

Strategies never propose the same configuration twice and only propose configurations whose `where` holds at the
session's sizes (the worker prunes those whose launch expressions fail there). A parent's best configurations
(`seed_configs`) and the default configuration (each list's first value) come first.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import re
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from peak_mcp.core.errors import AnnotationError, InvalidInput
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.evaluation.configs import BestConfig, Config, ConfigResult, Key, Kind, TuneReport
from peak_mcp.loop.tuning.failures import failures

STRATEGIES = ("auto", "exhaustive", "random", "optuna")
WHERE_EXAMPLES = 20  # where-pruned configurations listed in a report (all are counted)
_PROGRESS = re.compile(r"^config (\d+)/(\d+)\b")

def _where_label(sizes: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


class Space:
    """Every configuration of a spec's parameters, split into valid and pruned at one size set (at most
    launch.MAX_SPACE configurations, so both lists are materialized)."""

    def __init__(self, spec: LaunchSpec, sizes: Mapping[str, int]) -> None:
        if not spec.params:
            raise InvalidInput("the kernel declares no tuning parameters",
                               "add a line such as // peak: params BLOCK=[256, 128, 512] and use BLOCK in the "
                               "kernel.")
        self.spec, self.sizes = spec, dict(sizes)
        self.names = list(spec.params)
        self.size = spec.space_size()
        self.valid: list[Config] = []
        self.pruned: list[ConfigResult] = []
        self._valid_keys: set[Key] = set()
        for values in itertools.product(*spec.params.values()):
            config = Config(params=dict(zip(self.names, values, strict=True)))
            why = self._check(config)
            if why is None:
                self.valid.append(config)
                self._valid_keys.add(config.key)
            else:
                self.pruned.append(ConfigResult(params=config.params, status="pruned", kind=why[0], reason=why[1]))

    def _check(self, config: Config) -> tuple[Kind, str] | None:
        """`where` only: the launch expressions are evaluated by the worker, per configuration it is sent (three
        times the cost here, over spaces of up to 100k configurations)."""
        try:
            broken = self.spec.violated(self.sizes, config.params)
        except AnnotationError as exc:
            return "where", str(exc)
        return ("where", f"where {broken} is false at {_where_label(self.sizes)}") if broken else None

    @property
    def default(self) -> Config:
        return Config(params=self.spec.config())

    def contains(self, params: Mapping[str, int]) -> bool:
        """A valid configuration of this space (same names, declared values, meets `where` at these sizes)."""
        return set(params) == set(self.names) and tuple(sorted(params.items())) in self._valid_keys

    def index(self, config: Config) -> list[int]:
        """Each value's position in its list: the ordinal coordinates a model-based search works in."""
        return [self.spec.params[n].index(config.params[n]) for n in self.names]


class Strategy(ABC):
    """Ask for batches, tell results; never proposes a configuration twice, nor one outside the valid space."""

    name = "base"
    learns = False  # whether a batch's results change what it proposes next (else all may be asked at once)

    def __init__(self, space: Space, *, seed: int = 0, seed_configs: Iterable[Mapping[str, int]] = ()) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.seed = seed
        self.asked: set[Key] = set()
        self.values: dict[Key, float | None] = {}
        first = [Config(params=dict(c)) for c in seed_configs if space.contains(c)]
        if space.contains(space.default.params):
            first.append(space.default)
        self._first = list(dict.fromkeys(first))  # parents' best first, then the default; once each

    @property
    def remaining(self) -> int:
        return len(self.space.valid) - len(self.asked)

    def ask(self, n: int) -> list[Config]:
        """Up to n configurations not asked before; fewer (or none) once the valid space is exhausted."""
        out: list[Config] = []
        while len(out) < n and self.remaining > 0:
            config = self._pop_first() or self._propose()
            if config is None:
                break
            assert config.key not in self.asked and self.space.contains(config.params)
            self.asked.add(config.key)
            out.append(config)
        return out

    def tell(self, config: Config | Mapping[str, int], value_ms: float | None) -> None:
        """The measured median in ms, or None when the configuration failed (compile, limits, checks)."""
        config = config if isinstance(config, Config) else Config(params=dict(config))
        self.values[config.key] = value_ms
        self._observe(config, value_ms)

    def _pop_first(self) -> Config | None:
        while self._first:
            config = self._first.pop(0)
            if config.key not in self.asked:
                return config
        return None

    @abstractmethod
    def _propose(self) -> Config | None:
        """A configuration not in self.asked, valid in the space; None if there is none."""

    def _observe(self, config: Config, value_ms: float | None) -> None:  # noqa: B027 - optional hook
        pass


class Exhaustive(Strategy):
    """Every valid configuration in declaration order (the last parameter varies fastest)."""

    name = "exhaustive"

    def __init__(self, space: Space, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self._order = iter(space.valid)

    def _propose(self) -> Config | None:
        return next((c for c in self._order if c.key not in self.asked), None)


class RandomSearch(Strategy):
    """Valid configurations in a seeded random order, without replacement."""

    name = "random"

    def __init__(self, space: Space, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        order = list(space.valid)
        self.rng.shuffle(order)
        self._order = iter(order)

    def _propose(self) -> Config | None:
        return next((c for c in self._order if c.key not in self.asked), None)


FAILED_MS = float("inf")  # what the model is told for a configuration that failed: worse than any timed one


class OptunaSearch(Strategy):
    """Optuna's TPE sampler through its ask/tell interface. Parameters are ordinal by default (a value's position in
    its list, so neighbouring tile sizes inform each other); `categorical=True` treats them as unordered.

    The sampler may propose a configuration already asked or one outside the valid space: those are told to the
    study at once (the known time, or as failed) without a measurement, and it is asked again; after
    `max_attempts` such proposals, a random unasked valid configuration is taken instead."""

    name = "optuna"
    learns = True

    def __init__(self, space: Space, *, categorical: bool = False, n_startup: int | None = None,
                 max_attempts: int = 64, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        import optuna
        from optuna.distributions import CategoricalDistribution, IntDistribution

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial otherwise
        self.optuna, self.categorical, self.max_attempts = optuna, categorical, max_attempts
        params = space.spec.params
        self.dists = {n: CategoricalDistribution(params[n]) if categorical else IntDistribution(0, len(params[n]) - 1)
                      for n in space.names}
        startup = n_startup if n_startup is not None else max(4, min(10, len(space.valid) // 10))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate / constant_liar are marked experimental
            sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=startup,
                                                 multivariate=True, constant_liar=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: dict[Key, Any] = {}  # asked through the study, not yet told
        self._fallback = list(space.valid)
        self.rng.shuffle(self._fallback)

    def _encode(self, config: Config) -> dict[str, int]:
        return config.params if self.categorical else dict(zip(self.space.names, self.space.index(config),
                                                               strict=True))

    def _decode(self, trial_params: Mapping[str, int]) -> Config:
        if self.categorical:
            return Config(params={n: int(trial_params[n]) for n in self.space.names})
        return Config(params={n: self.space.spec.params[n][int(trial_params[n])] for n in self.space.names})

    def _propose(self) -> Config | None:
        from optuna.trial import TrialState

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(self.max_attempts):
                trial = self.study.ask(self.dists)
                config = self._decode(trial.params)
                if config.key not in self.asked and self.space.contains(config.params):
                    self._pending[config.key] = trial
                    return config
                if config.key in self.values:  # measured already: its known time, no second measurement
                    known = self.values[config.key]
                    self.study.tell(trial, FAILED_MS if known is None else known)
                elif config.key in self.asked:  # asked, not measured yet
                    self.study.tell(trial, state=TrialState.FAIL)
                else:  # outside the valid space: as good as a failure
                    self.study.tell(trial, FAILED_MS)
            config = next((c for c in self._fallback if c.key not in self.asked), None)
            if config is not None:
                self.study.enqueue_trial(self._encode(config))
                self._pending[config.key] = self.study.ask(self.dists)
            return config

    def _observe(self, config: Config, value_ms: float | None) -> None:
        value = FAILED_MS if value_ms is None else float(value_ms)
        trial = self._pending.pop(config.key, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if trial is not None:
                self.study.tell(trial, value)
            else:  # seeds and the default were not proposed by the study; it learns from them all the same
                self.study.add_trial(self.optuna.trial.create_trial(params=self._encode(config),
                                                                    distributions=self.dists, value=value))


def make_strategy(name: str, space: Space, *, max_configs: int, seed: int = 0,
                  seed_configs: Sequence[Mapping[str, int]] = ()) -> Strategy:
    """`auto`: exhaustive when every valid configuration fits in max_configs, else optuna."""
    if name not in STRATEGIES:
        raise InvalidInput(f"unknown tuning strategy {name!r}", f"use one of {', '.join(STRATEGIES)}.")
    if name == "auto":
        name = "exhaustive" if len(space.valid) <= max_configs else "optuna"
    kinds: dict[str, type[Strategy]] = {"exhaustive": Exhaustive, "random": RandomSearch, "optuna": OptunaSearch}
    return kinds[name](space, seed=seed, seed_configs=seed_configs)


Measure = Callable[[list[Config]], list[ConfigResult]]


def run_tuning(space: Space, strategy: Strategy, measure: Measure, *, version: int, max_configs: int,
               budget_s: float | None = None, batch_size: int | Callable[[], int] = 8,
               clock: Callable[[], float] = time.monotonic) -> TuneReport:
    """Ask the strategy for batches, measure each (a worker's tune job, or several at once on several devices),
    tell the results, until the space, the configuration count or the time budget runs out. The budget is checked
    between batches. `batch_size` may be a function, asked before each batch (how many devices are idle now)."""
    started = clock()
    tried: list[ConfigResult] = []
    stopped = "space exhausted"
    while True:
        if len(tried) >= max_configs:
            # the last configurations may have been the space's last: then the space ran out, not the count
            stopped = "space exhausted" if strategy.remaining <= 0 else f"max_configs={max_configs} reached"
            break
        if budget_s is not None and clock() - started >= budget_s:
            stopped = f"time budget of {budget_s:g} s spent"
            break
        size = batch_size() if callable(batch_size) else batch_size
        batch = strategy.ask(min(max(1, size), max_configs - len(tried)))
        if not batch:
            break
        results = measure(batch)
        by_key = {Config(params=r.params).key: r for r in results}
        for config in batch:
            result = by_key.get(config.key) or ConfigResult(params=config.params, status="failed", kind="error",
                                                            reason="no result came back for this configuration")
            strategy.tell(config, result.median_ms if result.status == "ok" else None)
            tried.append(result)
    timed = [r for r in tried if r.status == "ok" and r.median_ms is not None]
    fastest = min(timed, key=lambda r: r.median_ms or math.inf, default=None)
    best = BestConfig(params=fastest.params, median_ms=fastest.median_ms or 0.0, tflops=fastest.tflops,
                      gbps=fastest.gbps) if fastest else None
    return TuneReport(version=version, strategy=strategy.name, space_size=space.size, valid_size=len(space.valid),
                      tried=len(tried), where_pruned=len(space.pruned),
                      pruned=[r for r in tried if r.status == "pruned"] + space.pruned[:WHERE_EXAMPLES],
                      results=[r for r in tried if r.status != "pruned"], best=best, stopped=stopped,
                      failures=failures(tried),
                      search_s=round(clock() - started, 2),
                      devices=sorted({r.device for r in tried if r.device is not None}))


def usable_cores() -> int:
    """The cores this process may use (its affinity, not the host's count)."""
    return len(os.sched_getaffinity(0))


def batch_size(max_configs: int, devices: int = 1) -> int:
    """Configurations per worker job: one per core this process may use (its builds run in parallel; with several
    devices measuring at once, their jobs share the cores), but at least 8 batches in a search so that a model-based
    strategy learns between them, and never fewer than 8 per job."""
    devices = max(1, devices)
    return max(8, min(32, usable_cores() // devices, max_configs // (8 * devices)))


def crashed_config(stage: str, batch: Sequence[Config]) -> Config | None:
    """The configuration a tune job was on when it died (its last progress line names `config i/n`)."""
    match = _PROGRESS.match(stage)
    if not match or int(match.group(2)) != len(batch):
        return None
    i = int(match.group(1)) - 1
    return batch[i] if 0 <= i < len(batch) else None
