"""The tail records of ``continue_as_new`` chains on Valkey (see ``stores/_chains.py``): one
namespace-wide hash per chain, moved forward by ``c_chain.lua`` in one step."""

from __future__ import annotations

from lockgate.stores._chains import ChainLink
from lockgate.stores.valkey._connection import ValkeyConnection
from lockgate.stores.valkey._replies import as_text


class ValkeyChains(ValkeyConnection):
    """``hop``, ``link`` (JSON) and ``closed`` of each chain, under its root's key."""

    def get_chain_tail(self, root_name: str, root_run_id: str) -> ChainLink | None:
        link = self._cmd("HGET", self._key("chain", root_name, root_run_id), "link")
        return ChainLink.from_json(as_text(link)) if link is not None else None

    def advance_chain_tail(self, link: ChainLink) -> None:
        self._move_tail(link, close=False)

    def close_chain(self, link: ChainLink) -> None:
        self._move_tail(link, close=True)

    def chain_closed(self, root_name: str, root_run_id: str) -> bool:
        closed = self._cmd("HGET", self._key("chain", root_name, root_run_id), "closed")
        return closed is not None and as_text(closed) == "1"

    def _move_tail(self, link: ChainLink, *, close: bool) -> None:
        self._script(
            "c_chain",
            link.root_name,
            link.root_run_id,
            str(link.hop),
            link.to_json(),
            "1" if close else "",
        )
