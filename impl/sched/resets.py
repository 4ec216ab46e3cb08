"""`OperatorResets`: an operator's resets between steps (`workloads.controls`).

After new weights land an RLHF loop resets the prefix cache (preempting every running request
first if it must succeed), the KV connector's own cache and the encoder cache, whose contents
the new weights made stale.
"""

from __future__ import annotations

from mypy_extensions import trait

from impl.sched.preemption import Preemption


@trait
class OperatorResets(Preemption):
    def reset_prefix_cache(self, reset_running_requests: bool = False,
                           reset_connector: bool = False) -> bool:
        """Forget every cached prefix; refused (False) while blocks are in use, unless every
        running request is preempted first (`reset_running_requests`), last admitted first so
        they resume in their order, and as if none had run in the previous step; the next
        step's output lists them as preempted. `reset_connector`: the connector's cache too
        (even when the prefix reset is refused); True only if both reset."""
        if reset_running_requests:
            if any(r.num_output_placeholders for r in self.running):
                raise NotImplementedError(
                    "reset_prefix_cache with preempt_running while a step is in flight (async "
                    "scheduling): upstream drops that step's output, which the twin does not "
                    "model")
            while self.running:
                request = self.running.pop()
                self._preempt_request(request)
                self.preempted_between_steps.add(request.request_id)
            self.prev_step_scheduled_req_ids.clear()
        reset = self.kv_cache_manager.reset_prefix_cache()
        if reset_running_requests and not reset:
            raise RuntimeError("reset_prefix_cache: blocks still in use after preempting every "
                               "running request (a request waiting for a KV load holds them)")
        if reset_connector:
            reset = self.reset_connector_cache() and reset
        return reset

    def reset_connector_cache(self) -> bool:
        """Reset the connector's own cache: True without a connector or with one that keeps
        none; False if the connector refuses."""
        if self.connector is not None and self.connector.reset_cache() is False:
            return False
        if self.connector_prefix_cache_stats is not None:
            self.connector_prefix_cache_stats.reset = True
        return True

    def reset_encoder_cache(self) -> None:
        """Forget every encoder output (new weights make cached embeddings stale)."""
        self.encoder_cache.reset()
