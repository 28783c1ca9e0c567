"""The exchange backend: a folder through which a person or another program is the model. Each request is written
as request-<n>.json (the cell, the system prompt, the messages, max tokens); the reply is read from reply-<n>.txt
once it appears. Write the reply under another name and rename it to reply-<n>.txt, so it is never read half
written. n counts on from the folder's highest request, so a resumed run never reuses a number."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio

from peak_mcp.research.exchanges import Cell, Reply, Request


class NoReply(TimeoutError):
    pass


class FolderExchange:
    def __init__(self, folder: Path, timeout_s: float = 3600.0, poll_s: float = 0.5) -> None:
        self.folder, self.timeout_s, self.poll_s = folder, timeout_s, poll_s
        folder.mkdir(parents=True, exist_ok=True)
        numbers = [int(m.group(1)) for p in folder.glob("request-*.json")
                   if (m := re.fullmatch(r"request-(\d+)\.json", p.name))]
        self.next = max(numbers, default=0) + 1

    async def __call__(self, request: Request, cell: Cell) -> Reply:
        n, self.next = self.next, self.next + 1
        staged = self.folder / f".request-{n}.json.part"
        staged.write_text(json.dumps({"n": n, "reply_file": f"reply-{n}.txt", "cell": cell.model_dump(),
                                      **request.model_dump()}, indent=2) + "\n")
        staged.rename(self.folder / f"request-{n}.json")
        reply = self.folder / f"reply-{n}.txt"
        with anyio.move_on_after(self.timeout_s):
            while not reply.exists():
                await anyio.sleep(self.poll_s)
            return Reply(text=reply.read_text(), note=f"exchange {n}")
        raise NoReply(f"no {reply.name} in {self.folder} within {self.timeout_s:g} s")
