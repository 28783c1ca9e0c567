"""What `peak-mcp agent` is asked to do (AgentPlan), and what it saves when it stops to wait for a model reply that
is not there yet (AgentState, `--exchange-wait 0`): enough for `peak-mcp agent --resume STATE`, in another process
with another server on the same data dir, to go on where it stopped: the session, the instructions, pydantic-ai's
message history up to and including the request that waits (ModelMessagesTypeAdapter), the calls tried, the
versions there at the start, the time and model requests used so far, and the pending exchange number."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from peak_mcp.research.agent_budget import Budget, Tried

STATE_VERSION = 1


class AgentPlan(BaseModel):
    problem: str = "matmul"
    backend: str = "cuda"
    dtype: str = "f32"
    sizes: dict[str, int] | None = None
    model: str = Field(description="the --model string, as the report names it")
    budget: Budget = Field(default_factory=Budget)
    max_requests: int = Field(60, ge=1, description="model requests at most (pydantic-ai's usage limit)")
    sampling: bool = Field(True, description="the model answers the server's sampling requests; off, "
                                             "apply_transformation returns its brief and the model submits the kernel")
    base_url: str | None = None
    exchange_wait_s: float = Field(3600.0, ge=0, allow_inf_nan=False,
                                   description="exchange: seconds to wait for a reply; 0: save the state and stop")
    run: str = Field(default_factory=lambda: secrets.token_hex(8), pattern=r"^[0-9a-f]{16}$",
                     description="the run's tag on its exchange requests: a resumed run reads only its own")

    @model_validator(mode="after")
    def _no_sampling_without_waiting(self) -> AgentPlan:
        # A sampling request comes inside a tool call the server is running: no process can stop there and resume.
        if self.exchange_wait_s == 0 and self.model.startswith("exchange:"):
            self.sampling = False
        return self


class AgentState(BaseModel):
    version: int = STATE_VERSION
    plan: AgentPlan
    session_id: str
    instructions: str = Field(description="the model's instructions, as the first part gave them")
    report_dir: str | None = Field(None, description="where exchanges.jsonl and the report are written")
    messages: list[Any] = Field(description="pydantic-ai's message history, ending with the pending request")
    at_start: list[int] = Field(description="the versions the session had when the run began")
    tried: list[Tried] = Field(default_factory=list)
    seconds: float = Field(ge=0, allow_inf_nan=False, description="time used by all parts so far")
    requests: int = Field(ge=0, description="model requests answered so far (agent turns)")
    turns: int = Field(ge=0, description="model requests answered so far, the server's sampling requests included")
    pending: int = Field(ge=1, description="the exchange number whose reply the run waits for")
    exchange: str = Field(description="the exchange folder")
    parts: int = Field(1, description="processes the run has taken so far, this one included")
    done: str | None = Field(None, description="the run ended (why): the state cannot be resumed")

    def history(self) -> list[ModelMessage]:
        return ModelMessagesTypeAdapter.validate_python(self.messages)

    @property
    def reply_file(self) -> Path:
        return Path(self.exchange) / f"reply-{self.pending}.txt"


def dump_messages(messages: list[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def save(state: AgentState, path: Path) -> None:
    """Written aside and renamed, so a reader never sees half a state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.part")
    staged.write_text(state.model_dump_json(indent=1) + "\n")
    staged.rename(path)


def load(path: Path) -> AgentState:
    state = AgentState.model_validate_json(path.read_text())
    if state.version != STATE_VERSION:
        raise ValueError(f"{path} is a version {state.version} state; this peak-mcp reads version {STATE_VERSION}")
    if state.done:
        raise ValueError(f"{path}: that run has ended ({state.done}); start a new one")
    # Only an exchange model waits, so a state naming any other (an API model, a base URL that would receive the
    # API key) was not written by a run; the folders it names must be there already (nothing is made elsewhere).
    kind, _, folder = state.plan.model.partition(":")
    if kind != "exchange" or state.plan.base_url or Path(folder).resolve() != Path(state.exchange).resolve():
        raise ValueError(f"{path}: a waiting run's model is its exchange folder; this state names "
                         f"{state.plan.model!r}{' with a base URL' if state.plan.base_url else ''}")
    if not (Path(state.exchange) / f"request-{state.pending}.json").is_file():
        raise ValueError(f"{path}: its pending request-{state.pending}.json is not in {state.exchange}")
    if state.report_dir and not Path(state.report_dir).is_dir():
        raise ValueError(f"{path}: its report folder {state.report_dir} is not there")
    return state
