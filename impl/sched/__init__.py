"""Scheduler twin: requests, queues, scheduler output, scheduler."""
