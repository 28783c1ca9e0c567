"""The replay backend: the replies of a recorded run (its exchanges.jsonl) answered again, so a run can be
reproduced without the model. A request is found by its cell (model, transformation, repeat, attempt, and for a
sequence run its sequence and step), else by its text's hash. The cell comes first: a brief quotes the times
measured on its run and a failed attempt's expected values (the inputs are drawn per session), so on a re-run the
same request never has the same text (measured on lavapipe: 0 of 2 found by hash); and repeats of one cell
may well have the same text, which the hash cannot tell apart. The hash serves a plan that differs from the
recorded one but asks what was asked."""

from __future__ import annotations

from pathlib import Path

from peak_mcp.research.exchanges import Cell, Reply, Request, read_exchanges


class NotRecorded(LookupError):
    pass


class Replay:
    def __init__(self, recording: Path, by_cell: bool = True) -> None:
        exchanges = [e for e in read_exchanges(recording) if e.reply is not None]
        self.by_key = {e.key: e.reply for e in exchanges}
        self.by_cell = {e.cell.coordinates: e.reply for e in exchanges} if by_cell else {}
        self.recording = recording

    async def __call__(self, request: Request, cell: Cell) -> Reply:
        if cell.coordinates in self.by_cell:
            return Reply(text=self.by_cell[cell.coordinates], note="replayed by cell")
        if request.key in self.by_key:
            return Reply(text=self.by_key[request.key], note="replayed by hash")
        raise NotRecorded(f"{self.recording} holds no reply for this request ({cell.transformation} repeat "
                          f"{cell.repeat} attempt {cell.attempt})")
