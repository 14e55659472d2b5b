"""Rate limits per account and model (`--rate-limits FILE`, `--rate-limit NAME=VALUE`).

The file is JSON:

    {"reserve_output_tokens": 256,
     "default": {"requests_per_minute": 60, "input_tokens_per_minute": 100000,
                 "output_tokens_per_minute": 20000,
                 "batch": {"requests_per_minute": 600, "input_tokens_per_minute": 1000000}},
     "limits": [{"account": "key-0", "requests_per_minute": 10},
                {"account": "acct_9", "model": "tandem-demo-target", "output_tokens_per_minute": 5000}]}

- An account is a tenant as the gateway names it: "key-<i>" for the i-th --api-key, an account's
  id for an account token, "" for the anonymous caller of a server without keys.
- A rule's three limits apply to interactive requests; its "batch" object holds the same three
  for queued work (Workers AI `queueRequest`, OpenAI's Batch API), counted apart. A limit left out
  is no limit.
- The most specific rule wins, alone (no merging): account and model, then the account with any
  model, then the model with any account, then "default". `"model": "*"` or no model means any.
- A request's output tokens are reserved when it is admitted: min(max_tokens,
  reserve_output_tokens, the output limit) for each of its choices, all together at most the
  output limit; then replaced by the tokens it produced when it ends.

Every limit must be a positive integer: zero, a negative number, a fraction, an unknown key or a
repeated (account, model) pair is an error naming it (a usage error at start-up).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

ANY = "*"
INTERACTIVE = "interactive"
BATCH = "batch"
KINDS = (INTERACTIVE, BATCH)
# file key -> Limit field
_FIELDS = {"requests_per_minute": "requests", "input_tokens_per_minute": "input_tokens",
           "output_tokens_per_minute": "output_tokens"}
DEFAULT_RESERVE_OUTPUT_TOKENS = 256


@dataclass(frozen=True)
class Limit:
    """Per minute; None: no limit on that count."""

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def empty(self) -> bool:
        return self.requests is None and self.input_tokens is None and self.output_tokens is None


@dataclass(frozen=True)
class Rule:
    account: str = ANY
    model: str = ANY
    interactive: Limit = Limit()
    batch: Limit = Limit()

    def limit(self, kind: str) -> Limit:
        return self.batch if kind == BATCH else self.interactive


@dataclass(frozen=True)
class RateLimits:
    rules: dict[tuple[str, str], Rule] = field(default_factory=dict)   # (account, model) -> rule
    reserve_output_tokens: int = DEFAULT_RESERVE_OUTPUT_TOKENS

    def limit_for(self, account: str, model: str, kind: str) -> Limit | None:
        """The limit of the most specific rule; None when no rule applies or it sets none."""
        for key in ((account, model), (account, ANY), (ANY, model), (ANY, ANY)):
            rule = self.rules.get(key)
            if rule is not None:
                limit = rule.limit(kind)
                return None if limit.empty else limit
        return None

    def reservation(self, max_tokens: int, limit: Limit) -> int:
        """Output tokens reserved for one engine request at admission."""
        r = min(max_tokens, self.reserve_output_tokens)
        return min(r, limit.output_tokens) if limit.output_tokens is not None else r


def _positive_int(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be a positive integer, not {value!r}")
    if value <= 0:
        raise ValueError(f"{where} must be positive, not {value} (leave it out for no limit)")
    return value


def _limit(obj, where: str) -> Limit:
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be an object")
    unknown = sorted(set(obj) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_FIELDS)})")
    return Limit(**{_FIELDS[k]: _positive_int(v, f"{where}.{k}") for k, v in obj.items()})


def _rule(obj, where: str, named: bool) -> Rule:
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be an object")
    names = ("account", "model") if named else ()
    unknown = sorted(set(obj) - set(_FIELDS) - {"batch", *names})
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}")
    for name in names:
        if name in obj and not isinstance(obj[name], str):
            raise ValueError(f"{where}.{name} must be a string")
    batch = _limit(obj["batch"], f"{where}.batch") if "batch" in obj else Limit()
    own = _limit({k: v for k, v in obj.items() if k in _FIELDS}, where)
    return Rule(account=obj.get("account", ANY), model=obj.get("model", ANY) or ANY,
                interactive=own, batch=batch)


def parse_rate_limits(text: str, source: str = "rate limits") -> RateLimits:
    """The file's JSON -> RateLimits; ValueError naming the problem (the CLI's usage error)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: the top level must be an object")
    unknown = sorted(set(doc) - {"default", "limits", "reserve_output_tokens"})
    if unknown:
        raise ValueError(f"{source}: unknown key {unknown[0]!r} (known: default, limits, "
                         "reserve_output_tokens)")
    rules: dict[tuple[str, str], Rule] = {}
    if "default" in doc:
        rules[(ANY, ANY)] = _rule(doc["default"], f"{source}: default", named=False)
    entries = doc.get("limits", [])
    if not isinstance(entries, list):
        raise ValueError(f"{source}: 'limits' must be a list of rules")
    for i, obj in enumerate(entries):
        rule = _rule(obj, f"{source}: limits[{i}]", named=True)
        key = (rule.account, rule.model)
        if key in rules:
            raise ValueError(f"{source}: limits[{i}] repeats the rule for account "
                             f"{rule.account!r} and model {rule.model!r}")
        rules[key] = rule
    reserve = doc.get("reserve_output_tokens", DEFAULT_RESERVE_OUTPUT_TOKENS)
    reserve = _positive_int(reserve, f"{source}: reserve_output_tokens")
    return RateLimits(rules=rules, reserve_output_tokens=reserve)


def with_default_settings(limits: RateLimits, settings: list[str]) -> RateLimits:
    """`--rate-limit NAME=VALUE` flags over the file's default rule: NAME is a limit's key
    (requests_per_minute, ...), `batch.` + a key, or reserve_output_tokens."""
    default = {}
    rule = limits.rules.get((ANY, ANY))
    if rule is not None:
        default = _as_dict(rule.interactive)
        if not rule.batch.empty:
            default["batch"] = _as_dict(rule.batch)
    reserve = limits.reserve_output_tokens
    for setting in settings:
        name, sep, raw = setting.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"--rate-limit {setting!r}: give NAME=VALUE, e.g. requests_per_minute=60")
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"--rate-limit {setting!r}: the value must be an integer") from None
        if name == "reserve_output_tokens":
            reserve = _positive_int(value, "--rate-limit reserve_output_tokens")
        elif name.startswith("batch."):
            default.setdefault("batch", {})[name.removeprefix("batch.")] = value
        else:
            default[name] = value
    rules = dict(limits.rules)
    rules[(ANY, ANY)] = _rule(default, "--rate-limit", named=False)
    return RateLimits(rules=rules, reserve_output_tokens=reserve)


def _as_dict(limit: Limit) -> dict[str, int]:
    return {k: getattr(limit, f) for k, f in _FIELDS.items() if getattr(limit, f) is not None}
