"""What tokens cost: a price table in USD per million tokens that users can extend."""

from __future__ import annotations

# (input, output) USD per 1M tokens; keys are model names without the provider prefix.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "claude-opus-4": (15.00, 75.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-5-haiku": (0.80, 4.00),
}


def register_price(model: str, input_per_mtok: float, output_per_mtok: float) -> None:
    """Add or change a model's price (e.g. a fine-tune, a local model, a new release)."""
    PRICES[model] = (input_per_mtok, output_per_mtok)


def cost_of(model: str, tokens_in: int, tokens_out: int) -> float:
    """USD for one call; the longest matching prefix wins (dated snapshots match); 0 if unknown."""
    name = model.split(":", 1)[-1] if model.startswith(("openai:", "anthropic:")) else model
    best = max((k for k in PRICES if name.startswith(k)), key=len, default=None)
    if best is None:
        return 0.0
    price_in, price_out = PRICES[best]
    return (tokens_in * price_in + tokens_out * price_out) / 1_000_000
