"""The tokens a running Claude Code call has streamed, read from its stream-json log as it grows."""

from __future__ import annotations

import json
from pathlib import Path

from worker.agents.claude import StreamedUsage


def assistant(message_id: str, tokens_in: int, tokens_out: int, cached: int = 0) -> str:
    usage = {
        "input_tokens": tokens_in,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": tokens_out,
    }
    event = {"type": "assistant", "message": {"id": message_id, "usage": usage, "content": []}}
    return json.dumps(event) + "\n"


def test_each_message_counts_once_however_many_blocks_the_cli_printed(tmp_path: Path) -> None:
    log = tmp_path / "iteration-1.log"
    log.write_text("an earlier call's line\n")
    usage = StreamedUsage(log, start=log.stat().st_size)

    with log.open("a") as out:
        out.write('{"type": "system", "subtype": "init"}\n')
        out.write(assistant("msg_1", 100, 1, cached=900))
        out.write(assistant("msg_1", 100, 1, cached=900))  # its second content block
    assert usage.read() == (1000, 1)

    line = assistant("msg_2", 50, 7)
    with log.open("a") as out:
        out.write(line[:20])  # a line still being written
    assert usage.read() == (1000, 1)
    with log.open("a") as out:
        out.write(line[20:] + "not json\n")
    assert usage.read() == (1050, 8)


def test_a_turn_is_pending_after_tool_results_until_the_next_reply(tmp_path: Path) -> None:
    log = tmp_path / "iteration-1.log"
    log.write_text("")
    usage = StreamedUsage(log, start=0)
    tool_results = json.dumps({"type": "user", "message": {"content": []}}) + "\n"

    def pending() -> bool:
        usage.read()
        return usage.turn_pending

    log.write_text(assistant("msg_1", 10, 1))
    assert not pending()
    with log.open("a") as out:
        out.write(tool_results)
    assert pending()  # the CLI asks the model again
    with log.open("a") as out:
        out.write(assistant("msg_2", 10, 1) + '{"type": "result", "total_cost_usd": 0.1}\n')
    assert not pending()  # its last reply: the call ends by itself


def test_a_log_not_written_yet_is_nothing_streamed(tmp_path: Path) -> None:
    assert StreamedUsage(tmp_path / "missing.log", start=0).read() == (0, 0)
