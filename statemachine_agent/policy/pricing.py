"""What a model call costs, from the tokens the API reports.

Input dominates an agent's bill (the whole history is re-sent every iteration),
so cost counts every kind of token: plain input, output, cache reads and cache
writes, each at its own rate. Rates are USD per million tokens and are defaults
to override: prices change, and a deployment may have its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from statemachine_agent.errors import Error
from statemachine_agent.models.base import Usage

MTOK = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """Rates for one model in USD per million tokens."""

    input: float
    output: float
    cache_read_factor: float = 0.1
    cache_write_5m_factor: float = 1.25
    cache_write_1h_factor: float = 2.0

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.input * self.cache_read_factor
            + usage.cache_write_5m_tokens * self.input * self.cache_write_5m_factor
            + usage.cache_write_1h_tokens * self.input * self.cache_write_1h_factor
        ) / MTOK


DEFAULT_PRICES: Mapping[str, Price] = {
    "claude-sonnet-5": Price(input=3.0, output=15.0),
    "claude-sonnet-4-5": Price(input=3.0, output=15.0),
    "claude-sonnet-4-6": Price(input=3.0, output=15.0),
    "claude-haiku-4-5": Price(input=1.0, output=5.0),
    "claude-opus-4-5": Price(input=5.0, output=25.0),
}
"""Documented defaults; pass `prices=` to use your own."""


class UnknownModelPriceError(Error, KeyError):
    """Raised when a cost is asked for a model the price table does not know."""


@dataclass(frozen=True)
class PriceTable:
    """Looks up a model's price, accepting dated ids (`claude-haiku-4-5-20251001`)."""

    prices: Mapping[str, Price]

    def get(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        for name in sorted(self.prices, key=len, reverse=True):
            if model.startswith(name + "-"):
                return self.prices[name]
        return None

    def require(self, model: str) -> Price:
        price = self.get(model)
        if price is None:
            known = ", ".join(sorted(self.prices))
            raise UnknownModelPriceError(
                f"no price for model {model!r}; known models: {known}. "
                "Pass prices={...} with a Price for it."
            )
        return price

    def cost(self, model: str, usage: Usage) -> float:
        """Cost of `usage` on `model`; zero for a model without a price."""
        price = self.get(model)
        return price.cost(usage) if price else 0.0


DEFAULT_PRICE_TABLE = PriceTable(DEFAULT_PRICES)
