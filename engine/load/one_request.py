"""One request of the load, wherever the load is held (this process: engine/load/holder.py; a
worker process or Ray actor: engine/load/worker.py): what the pool (engine/load/controller.py)
launches, the same code at every scale.

- a trace row (`item`) at its intended time: the row's prompt (engine/workload/trace.py);
- on a schedule (open loop, `t_intended`): the workload's next prompt;
- in a slot (closed loop): a multi-turn session (turns > 1) or the next prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .conversation import run_session

if TYPE_CHECKING:
    from ..workload.prompts import Prompt, PromptSource, WorkloadConfig
    from .sender import Sender


async def one_request(
    sender: Sender,
    source: PromptSource,
    workload: WorkloadConfig,
    t_intended: float | None,
    item: object,
    row_prompt: Callable[[object], Prompt] | None,
) -> None:
    if item is not None and row_prompt is not None:
        p = row_prompt(item)
        await sender.send(p.text, p.max_tokens, p.expected_input_tokens, t_intended=t_intended)
    elif t_intended is None and workload.turns > 1:
        await run_session(sender, source, workload.turns, workload.think_s)
    else:
        p = source.next()
        if t_intended is not None:
            await sender.send(p.text, p.max_tokens, p.expected_input_tokens, t_intended=t_intended)
        else:
            await sender.slot_request(p.text, p.max_tokens, p.expected_input_tokens)
