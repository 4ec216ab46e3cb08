"""Streaming-input sessions: a resumable request continues across input parts.

A session's turn ends on a stop (EOS, a stop token, its part's `max_tokens`) like any request,
and the output says so; but the request stays. If the next part already arrived (queued while
the turn ran) it continues at once, else it waits (`WAITING_FOR_STREAMING_REQ`), keeping its
KV blocks and a seat (the seats count waiting sessions), skipped by admission until a part
comes. Continuing keeps what the turn computed: its outputs become prompt, the token a stop
sampled last (never computed) is dropped, the part's tokens follow, and the request is
admitted again from `kv_holding_waiting` as a new request with its computed tokens. A close
(a non-resumable request under the session's id) finishes a waiting session at once (aborted)
or, queued, after the turn in progress.
"""

from __future__ import annotations

from collections import deque

from mypy_extensions import trait

from impl.sched.request import Request, RequestStatus, StreamingUpdate
from impl.sched.state import SchedulerState


@trait
class StreamingSessions(SchedulerState):
    def _handle_stopped_request(self, request: Request) -> bool:
        """Whether a stopped request is finished (a session's turn ends without finishing).

        A continuing session is queued here, as 0.32 does; 0.33 queues it once the stopped
        requests have left their queues. That differs only for a turn ending while the session
        is not running (0.32 then drops it from the queues too), which only a step's output
        arriving after a preemption reaches: async scheduling, refused for sessions."""
        if not request.resumable:
            return True
        request.num_computed_tokens -= request.num_output_placeholders
        request.spec_token_ids = []
        request.num_output_placeholders = 0
        queue = request.streaming_queue
        if queue:
            update = queue.popleft()
            if update is None:
                return True  # closed while the turn ran
            self._update_request_as_session(request, update)
        else:
            request.status = RequestStatus.WAITING_FOR_STREAMING_REQ
            self.num_waiting_for_streaming_input += 1
        self._enqueue_waiting_request(request)
        return False

    def _update_request_as_session(self, session: Request, update: StreamingUpdate) -> None:
        """The next part continues the session from what it computed. (0.33 words it as every
        token but the last sampled one: the same count, since 0.33 takes tokens a stop trimmed
        back from the computed ones, `cache_verified_blocks_on_output`; in 0.32 a stop that
        trims verified drafts leaves the computed count past them, and the session keeps the
        stop's token too.)"""
        session.continue_session(session.num_computed_tokens, update.prompt_token_ids,
                                 update.max_tokens)
        session.arrival_time = update.arrival_time
        if session.status == RequestStatus.WAITING_FOR_STREAMING_REQ:
            self.num_waiting_for_streaming_input -= 1
        session.status = RequestStatus.WAITING

    def _enqueue_waiting_request(self, request: Request) -> None:
        """Back to `kv_holding_waiting`: a session after a turn holds the blocks of what it
        computed (at least its first part's prompt); one waiting for input counts as skipped by
        admission."""
        if request.status == RequestStatus.WAITING_FOR_STREAMING_REQ:
            self.deferred_waiting.add(request.request_id)
        self.kv_holding_waiting.add_request(request)

    def _add_to_session(self, session: Request, part: Request) -> bool:
        """`part` arrived under a known id: the session's next input (or its close, queued
        while a turn runs). False: the close of a session waiting for input, which the caller
        finishes."""
        update = (StreamingUpdate(part.prompt_token_ids, part.max_tokens, part.arrival_time)
                  if part.resumable else None)
        if session.status != RequestStatus.WAITING_FOR_STREAMING_REQ:
            if session.streaming_queue is None:
                raise ValueError(f"request {part.request_id!r}: id already in use")
            session.streaming_queue.append(update)
        elif update is not None:
            self._update_request_as_session(session, update)
        else:
            return False
        return True

    def _open_session(self, request: Request) -> None:
        if request.resumable:
            request.streaming_queue = deque()
