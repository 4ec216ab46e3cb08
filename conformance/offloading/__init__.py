"""The OffloadingConnector's CPU manager, twin against upstream, in lockstep (issue 31)."""
