"""DynamoDB admission counters: conditional increments in one transaction per admission, shared by every replica."""

from __future__ import annotations

import random
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, Literal

from botocore.exceptions import ClientError

from shared.storage.aws.accounts_layout import (
    TTL_ATTRIBUTE,
    AccountsTable,
    AwsAccountsConfig,
    condition_failed,
    counter_key,
    ints,
    message_log_key,
    wire_item,
)
from shared.storage.conversations import StoreUnavailableError
from shared.storage.limits import COUNTER_RETENTION_S, ChargeOutcome, MessageCapOutcome, WindowCharge, WindowCount
from shared.storage.timestamps import from_iso, to_iso

__all__ = ["AwsAccountsConfig", "AwsRateLimits"]

_INCREMENT = "SET #expires_at = :expires_at ADD #requests :requests, #tokens :tokens"


def _fits(name: str, left: int) -> str:
    """`{name} + add <= max` as a condition on the stored value, `left` = max - add (a missing counter is 0)."""
    if left < 0:  # more than the whole budget: a comparison with a missing attribute is false too
        return f"#{name} <= :left_{name}"
    return f"(attribute_not_exists(#{name}) OR #{name} <= :left_{name})"


def _increment(charge: WindowCharge) -> dict[str, Any]:
    """UpdateItem arguments adding the charge if the window stays within both maxima; the counter expires an hour
    after its window closes."""
    return {
        "Key": counter_key(charge.scope, charge.window_start),
        "UpdateExpression": _INCREMENT,
        "ConditionExpression": f"{_fits('requests', charge.max_requests - charge.requests)}"
        f" AND {_fits('tokens', charge.max_tokens - charge.tokens)}",
        "ExpressionAttributeNames": {"#requests": "requests", "#tokens": "tokens", "#expires_at": TTL_ATTRIBUTE},
        "ExpressionAttributeValues": {
            ":requests": charge.requests,
            ":tokens": charge.tokens,
            ":left_requests": charge.max_requests - charge.requests,
            ":left_tokens": charge.max_tokens - charge.tokens,
            ":expires_at": charge.window_start + charge.window_s + COUNTER_RETENTION_S,
        },
    }


def _count(charge: WindowCharge, item: dict[str, Any] | None) -> WindowCount:
    return WindowCount(scope=charge.scope, window_start=charge.window_start, **ints(item or {}, "requests", "tokens"))


def _refused_by(charge: WindowCharge, count: WindowCount) -> Literal["requests", "tokens"] | None:
    if count.requests + charge.requests > charge.max_requests:
        return "requests"
    if count.tokens + charge.tokens > charge.max_tokens:
        return "tokens"
    return None


def _first_refusal(charges: list[WindowCharge], found: list[WindowCount]) -> ChargeOutcome | None:
    """The refusal the counts as found call for (the first refused charge in list order), or None if all fit."""
    for charge, count in zip(charges, found, strict=True):
        if (refused_by := _refused_by(charge, count)) is not None:
            return ChargeOutcome(admitted=False, counts=found, refused_scope=charge.scope, refused_by=refused_by)
    return None


def _added(charge: WindowCharge, count: WindowCount) -> WindowCount:
    added = {"requests": count.requests + charge.requests, "tokens": count.tokens + charge.tokens}
    return count.model_copy(update=added)


class AwsRateLimits(AccountsTable):
    """The `RateLimitStore` on the accounts table: fixed-window counters and rolling message logs.

    A refused charge changes nothing: it is refused on a consistent read, or by a condition of the one transaction
    that applies all charges. Counts: exact for a single charge; with several, the totals as read plus this charge
    (another replica's charge landing in between is not included)."""

    def charge(self, charges: list[WindowCharge]) -> ChargeOutcome:
        keys = {(c.scope, c.window_start) for c in charges}
        if len(keys) != len(charges):  # a transaction may touch an item once
            raise ValueError("charge each scope and window at most once")
        if len(charges) == 1 and (charges[0].requests or charges[0].tokens):
            return self._charge_one(charges[0])
        # Read first: refusing on a consistent read costs a read, not a cancelled transaction's writes (the cheap
        # path when a client hammers a full window), and a pure read (zero charges, for headers) writes nothing.
        found = self._counts(charges)
        if (refusal := _first_refusal(charges, found)) is not None:
            return refusal
        if all(c.requests == 0 and c.tokens == 0 for c in charges):
            return ChargeOutcome(admitted=True, counts=found)
        table = self.config.table_name
        updates = [
            {"Update": {"TableName": table, **_increment(c), "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}
            for c in charges
        ]
        try:
            self._write(self._ddb.transact_write_items, TransactItems=updates, ClientRequestToken=uuid.uuid4().hex)
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            # Another replica filled a window since the read: counts as found by the failed conditions.
            for index, reason in enumerate(exc.response.get("CancellationReasons", [])):
                if reason.get("Code") == "ConditionalCheckFailed":
                    found[index] = _count(charges[index], wire_item(reason.get("Item")))
            refusal = _first_refusal(charges, found)
            if refusal is None:  # only when a failure carried no item: name the first failed charge
                first = next(i for i, r in enumerate(exc.response["CancellationReasons"]) if r.get("Code") != "None")
                refusal = ChargeOutcome(
                    admitted=False, counts=found, refused_scope=charges[first].scope, refused_by="requests"
                )
            return refusal
        return ChargeOutcome(admitted=True, counts=[_added(c, n) for c, n in zip(charges, found, strict=True)])

    def settle(self, scope: str, window_start: int, token_delta: int) -> None:
        if token_delta == 0:
            return
        key = counter_key(scope, window_start)
        if token_delta > 0:
            self._settle(key, "ADD #tokens :delta", "attribute_exists(#tokens)", {":delta": token_delta})
            return
        deadline = time.monotonic() + self.config.contention_budget_s
        subtract, zero = {":drop": -token_delta, ":delta": token_delta}, {":drop": -token_delta, ":zero": 0}
        while True:  # subtract if that keeps the count >= 0, else set 0; a missing window stays missing
            if self._settle(key, "ADD #tokens :delta", "#tokens >= :drop", subtract) is not False:
                return
            if self._settle(key, "SET #tokens = :zero", "#tokens < :drop", zero) is not False:
                return
            self._pause(deadline)  # a charge raised it between the two: subtract again

    def record_message(self, subject: str, at: datetime, window_s: int, cap: int) -> MessageCapOutcome:
        since, moment = to_iso(at - timedelta(seconds=window_s)), to_iso(at)
        deadline = time.monotonic() + self.config.contention_budget_s
        while True:
            item = self._get(message_log_key(subject))
            log = [entry for entry in (item or {}).get("log", []) if entry > since]  # kept sorted
            if len(log) >= cap:
                return MessageCapOutcome(admitted=False, used=len(log), oldest_at=from_iso(log[0]))
            logged = sorted([*log, moment])
            expires_at = int(from_iso(logged[-1]).timestamp()) + window_s + COUNTER_RETENTION_S
            if self._replace_log(subject, item, logged, expires_at):
                return MessageCapOutcome(admitted=True, used=len(logged), oldest_at=from_iso(log[0]) if log else at)
            self._pause(deadline)

    def forget_message(self, subject: str, at: datetime) -> None:
        moment = to_iso(at)
        deadline = time.monotonic() + self.config.contention_budget_s
        while True:
            item = self._get(message_log_key(subject))
            if item is None or moment not in item["log"]:
                return
            log = list(item["log"])
            log.remove(moment)  # one entry: two messages may share an instant
            if self._replace_log(subject, item, log, int(item[TTL_ATTRIBUTE])):
                return
            self._pause(deadline)

    # -- helpers --------------------------------------------------------------------------------------------------

    def _charge_one(self, charge: WindowCharge) -> ChargeOutcome:
        try:
            item = self._write(
                self._ddb.update_item,
                TableName=self.config.table_name,
                **_increment(charge),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            count = _count(charge, wire_item(exc.response.get("Item")))
            refused_by = _refused_by(charge, count) or "requests"
            return ChargeOutcome(admitted=False, counts=[count], refused_scope=charge.scope, refused_by=refused_by)
        return ChargeOutcome(admitted=True, counts=[_count(charge, item)])

    def _counts(self, charges: list[WindowCharge]) -> list[WindowCount]:
        keys = [counter_key(c.scope, c.window_start) for c in charges]
        found = self._batch_get(keys)
        return [_count(c, found.get((k["pk"], k["sk"]))) for c, k in zip(charges, keys, strict=True)]

    def _settle(self, key: dict[str, str], expression: str, condition: str, values: dict[str, int]) -> bool | None:
        """Apply `expression` to the window if `condition` holds: True; False when the window exists but the
        condition failed; None when there is no such window (settling never creates one)."""
        try:
            self._write(
                self._ddb.update_item,
                TableName=self.config.table_name,
                Key=key,
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#tokens": "tokens"},
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return True
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            return None if exc.response.get("Item") is None else False

    def _replace_log(self, subject: str, item: dict[str, Any] | None, log: list[str], expires_at: int) -> bool:
        """Write the log if nobody did since `item` was read (optimistic concurrency on its version)."""
        version = 0 if item is None else int(item["version"])
        condition = "attribute_not_exists(#pk)" if item is None else "#version = :version"
        try:
            self._write(
                self._ddb.put_item,
                TableName=self.config.table_name,
                Item={
                    **message_log_key(subject),
                    "log": log,
                    "version": version + 1,
                    TTL_ATTRIBUTE: expires_at,
                },
                ConditionExpression=condition,
                ExpressionAttributeNames={"#pk": "pk"} if item is None else {"#version": "version"},
                **({} if item is None else {"ExpressionAttributeValues": {":version": version}}),
            )
            return True
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise

    def _pause(self, deadline: float) -> None:
        """Between rounds of an optimistic write that lost a race: a short random pause, within the budget."""
        if time.monotonic() > deadline:
            raise StoreUnavailableError("Account storage is too contended right now.")
        time.sleep(random.uniform(0, 0.01))
