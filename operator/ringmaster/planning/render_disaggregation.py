"""`ringmaster plan`'s table of an LLM endpoint's arrangements (spec.disaggregation Auto or
On): one aggregated set of replicas against prefill and decode sides, with the KV transfer's
share of TTFT, and which the endpoint runs."""

from __future__ import annotations

from ringmaster.engine.llm_disaggregation import DisaggregationChoice
from ringmaster.engine.llm_serving import LlmServingPrediction
from ringmaster.planning.render import money, table


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.4g}"


def _shape(p: LlmServingPrediction) -> str:
    return f"{p.replicas} x {p.tensor_parallel * p.pipeline_parallel} ({p.layout.split(';')[0]})"


def _meets(feasible: bool) -> str:
    return "yes" if feasible else "no"


def render_disaggregation(mode: str, backend: str, choice: DisaggregationChoice) -> str:
    a, d = choice.aggregated, choice.disaggregated
    rows = [
        (
            "aggregated",
            _shape(a),
            _ms(a.ttft_p99_seconds),
            _ms(a.tpot_p99_seconds),
            "-",
            money(a.cost_per_hour_usd),
            _meets(a.feasible),
        )
    ]
    if d is not None:
        share = d.transfer_share_of_ttft
        transfer = _ms(d.transfer.seconds_p99) + (f" ({share:.1%})" if share is not None else "")
        rows += [
            (
                "disaggregated",
                f"{d.prefill.replicas} + {d.decode.replicas} replicas",
                _ms(d.ttft_p99_seconds),
                _ms(d.tpot_p99_seconds),
                transfer,
                money(d.cost_per_hour_usd),
                _meets(d.feasible),
            ),
            (
                "  prefill side",
                _shape(d.prefill),
                _ms(d.prefill.ttft_p99_seconds),
                "-",
                "",
                money(d.prefill.cost_per_hour_usd),
                _meets(d.prefill.feasible),
            ),
            (
                "  decode side",
                _shape(d.decode),
                _ms(d.decode.ttft_p99_seconds),
                _ms(d.decode.tpot_p99_seconds),
                "",
                money(d.decode.cost_per_hour_usd),
                _meets(d.decode.feasible),
            ),
        ]
    lines = [
        f"disaggregation {mode} ({backend}): aggregated against prefill / decode sides "
        "(TTFT p99 = prefill + KV transfer + decode's first step)",
        table(
            (
                "arrangement",
                "replicas x accelerators",
                "TTFT p99 ms",
                "TPOT p99 ms",
                "KV transfer p99 ms (of TTFT)",
                "$/hour",
                "meets SLOs",
            ),
            rows,
            right={2, 3, 4, 5},
        ),
    ]
    if d is not None:
        t = d.transfer
        lines.append(
            f"KV transfer: {t.bytes_mean / 1e6:,.4g} MB per request at the mean prompt over "
            f"{t.link}; {t.evidence}"
        )
        if d.reason:
            lines.append(f"disaggregated misses: {d.reason}")
    lines.append(f"runs {choice.chosen.lower()}: {choice.why}")
    return "\n".join(lines)
