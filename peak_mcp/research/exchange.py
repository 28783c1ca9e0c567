"""The exchange backend: a folder through which a person or another program is the model. Each request is written
as request-<n>.json (the cell, the system prompt, the messages, max tokens); the reply is read from reply-<n>.txt
once it appears. Write the reply under another name and rename it to reply-<n>.txt, so it is never read half
written. n counts on from the folder's highest request, claimed by an exclusive create (.claim-<n>), so a run never
reuses a number another run (or another session of a parallel experiment) wrote or is writing; a run resumed from
its saved state (`peak-mcp agent --resume`) asks its pending request once more under its own number
(the request file must carry the run's tag, `run`), and counts on from the folder's highest after it. With no wait
(timeout 0) a missing reply raises Waiting at once: the caller saves its state and exits."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import anyio

from peak_mcp.research.exchanges import Cell, Reply, Request


class NoReply(TimeoutError):
    pass


class Waiting(NoReply):
    """The reply to request n is not there yet and the exchange does not wait for it."""

    def __init__(self, folder: Path, n: int, turn: int) -> None:
        self.folder, self.n, self.turn = folder, n, turn  # turn: the cell's, the run's count of model requests
        super().__init__(f"waiting for {folder / f'reply-{n}.txt'}")


class FolderExchange:
    def __init__(self, folder: Path, timeout_s: float = 3600.0, poll_s: float = 0.5, start: int | None = None,
                 run: str | None = None) -> None:
        self.folder, self.timeout_s, self.poll_s, self.run = folder, timeout_s, poll_s, run
        folder.mkdir(parents=True, exist_ok=True)
        self.pending = start  # a resumed run's request, asked again under its number; then the folder's next

    def _claim(self) -> int:
        """The next number no writer holds: past the folder's highest request or claim, claimed by creating
        .claim-<n> exclusively (two writers that read the same highest never both get n; request-<n>.json still
        appears whole, through its rename). Claims stay: a number is never handed out twice."""
        numbers = [int(m.group(1)) for p in self.folder.iterdir()
                   if (m := re.fullmatch(r"(?:request-|\.claim-)(\d+)(?:\.json)?", p.name))]
        n = max(numbers, default=0) + 1
        while True:
            try:
                os.close(os.open(self.folder / f".claim-{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                n += 1
                continue
            if not (self.folder / f"request-{n}.json").exists():  # written by a writer that claims nothing
                return n
            n += 1

    async def __call__(self, request: Request, cell: Cell) -> Reply:
        n, resumed = (self.pending, True) if self.pending is not None else (self._claim(), False)
        self.pending = None
        reply = self.folder / f"reply-{n}.txt"
        asked = self.folder / f"request-{n}.json"
        if resumed and asked.exists():  # the resumed request stays as it was answered, if it is this run's
            try:
                owner = json.loads(asked.read_text()).get("run")
            except (OSError, ValueError, AttributeError):
                owner = None
            if owner != self.run:
                raise NoReply(f"{asked} is not this run's request (run {owner!r}, this run {self.run!r}): its "
                              "reply is not read")
        else:
            staged = self.folder / f".request-{n}.json.part"
            staged.write_text(json.dumps({"n": n, "run": self.run, "reply_file": reply.name,
                                          "cell": cell.model_dump(exclude_none=True), **request.model_dump()},
                                         indent=2) + "\n")
            staged.rename(asked)
        if self.timeout_s <= 0 and not reply.exists():
            raise Waiting(self.folder, n, cell.repeat)
        with anyio.move_on_after(self.timeout_s):
            while not reply.exists():
                await anyio.sleep(self.poll_s)
            return Reply(text=reply.read_text(), note=f"exchange {n}")
        raise NoReply(f"no {reply.name} in {self.folder} within {self.timeout_s:g} s")
