"""``continue_as_new`` chains as stores keep them: a run's place in its chain, and the tail
record that lets any id of a chain find the live run in a constant number of reads.

A run continued as new ends ``run:continued`` naming its successor, which the store creates in
the same step (:meth:`ControlStore.continue_run`), handing it what the run held undelivered.
The chain's *root* is the run that started it; its tail record, keyed by the root, names the
newest link known and only ever moves forward, so a late or repeated write never pulls it back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

from lockgate._errors import CapabilityMissing, ContinuationChainError
from lockgate.journal._events import EventKind

if TYPE_CHECKING:
    from lockgate.stores._base import EventLogStore

#: ``run:continued``'s ``reason`` for a ``continue_as_new`` (a hand-on to new gates says
#: ``gates``).
CONTINUE_REASON = "continue_as_new"


@dataclass(frozen=True)
class ChainLink:
    """One run of a chain: its name and id, the chain's root, and its hop (the root is 0)."""

    name: str
    run_id: str
    root_name: str
    root_run_id: str
    hop: int

    @classmethod
    def root(cls, name: str, run_id: str) -> ChainLink:
        return cls(name, run_id, name, run_id, 0)

    def successor(self, name: str, run_id: str) -> ChainLink:
        return ChainLink(name, run_id, self.root_name, self.root_run_id, self.hop + 1)

    def provenance_source(self) -> dict[str, Any]:
        """What this link's ``run:init`` records in ``provenance.source``."""
        return {
            "chain_root_name": self.root_name,
            "chain_root_run_id": self.root_run_id,
            "chain_hop": self.hop,
        }

    def continued_payload(self) -> dict[str, Any]:
        """The ``run:continued`` payload that hands off to *this* link."""
        return {
            "name": self.name,
            "run_id": self.run_id,
            "reason": CONTINUE_REASON,
            "root_name": self.root_name,
            "root_run_id": self.root_run_id,
            "hop": self.hop,
        }

    @classmethod
    def from_continued_payload(cls, payload: Mapping[str, Any]) -> ChainLink:
        """The successor a ``run:continued`` payload names. Raises
        :class:`ContinuationChainError` naming the first field missing or of the wrong type."""
        return cls._parse(payload, "run:continued")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> ChainLink:
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ContinuationChainError(
                f"a chain record is not JSON: {exc}", reason="unreadable_link"
            ) from None
        if not isinstance(data, dict):
            raise ContinuationChainError(
                "a chain record is not an object", reason="unreadable_link"
            )
        return cls._parse(data, "chain record")

    @classmethod
    def _parse(cls, payload: Mapping[str, Any], what: str) -> ChainLink:
        fields: dict[str, Any] = {}
        for key, kind in (
            ("name", str),
            ("run_id", str),
            ("root_name", str),
            ("root_run_id", str),
            ("hop", int),
        ):
            value = payload.get(key)
            if not isinstance(value, kind) or isinstance(value, bool) or value == "":
                raise ContinuationChainError(
                    f"{what} has no valid {key!r} (got {value!r})", reason="unreadable_link"
                )
            fields[key] = value
        if fields["hop"] < 0:
            raise ContinuationChainError(f"{what} has a negative hop", reason="unreadable_link")
        return cls(**fields)


def chain_link(init_payload: Mapping[str, Any] | None, name: str, run_id: str) -> ChainLink:
    """The chain position a run's ``run:init`` payload records: a successor carries its root
    and hop in ``provenance.source``; any other run is its own root."""
    provenance = (init_payload or {}).get("provenance")
    source = provenance.get("source") if isinstance(provenance, Mapping) else None
    if not isinstance(source, Mapping) or "chain_hop" not in source:
        return ChainLink.root(name, run_id)
    return ChainLink._parse(
        {
            "name": name,
            "run_id": run_id,
            "root_name": source.get("chain_root_name"),
            "root_run_id": source.get("chain_root_run_id"),
            "hop": source.get("chain_hop"),
        },
        f"run:init of {run_id!r}",
    )


def successor_run_id(link: ChainLink) -> str:
    """The id of the run ``link`` continues as: fixed by the root and the hop, so a repeated
    ``continue_as_new`` (a replay after a crash) finds the successor it already made."""
    return f"{link.root_run_id}.c{link.hop + 1}"


class ChainStore:
    """The tail record of each chain, keyed by its root (see the module's docstring)."""

    def get_chain_tail(self, root_name: str, root_run_id: str) -> ChainLink | None:
        """The newest link recorded for the chain rooted at this run, or None."""
        raise CapabilityMissing.of(self, "chains")

    def advance_chain_tail(self, link: ChainLink) -> None:
        """Record ``link`` as its chain's tail unless a later hop is recorded already."""
        raise CapabilityMissing.of(self, "chains")

    def close_chain(self, link: ChainLink) -> None:
        """Record ``link`` as its chain's final link (unless a later hop is recorded): the
        chain has ended with it."""
        raise CapabilityMissing.of(self, "chains")

    def chain_closed(self, root_name: str, root_run_id: str) -> bool:
        """Whether the chain rooted at this run has ended (:meth:`close_chain`)."""
        raise CapabilityMissing.of(self, "chains")

    def read_inbox_seal(self, name: str, run_id: str) -> ChainLink | None:
        """The successor this run handed its inbox to when it continued as new, or None (it
        has not). The hand-over is one step with the run's end, so this is read from the
        ``run:continued`` that ended it."""
        last = cast("EventLogStore", self).get_last_event(name, run_id)
        if last is None or last.kind != EventKind.RUN_CONTINUED:
            return None
        if last.payload.get("reason") != CONTINUE_REASON:
            return None
        return ChainLink.from_continued_payload(last.payload)

    def chain_adopted(self, name: str, run_id: str) -> bool:
        """Whether this successor has taken over its predecessor's inbox: true as soon as it
        exists, since the store creates it and moves the inbox to it in one step."""
        return cast("EventLogStore", self).get_last_event(name, run_id) is not None


def advance_record(
    recorded: ChainLink | None, recorded_closed: bool, link: ChainLink, *, close: bool
) -> tuple[ChainLink, bool] | None:
    """The tail record after ``advance_chain_tail`` (``close`` False) or ``close_chain`` of
    ``link`` over what is recorded, or None when it stays as it is: it only moves forward, and
    a close of the recorded hop only marks it final."""
    if recorded is not None and recorded.hop > link.hop:
        return None
    if recorded is not None and recorded.hop == link.hop:
        if close and not recorded_closed:
            return recorded, True
        return None
    return link, close
