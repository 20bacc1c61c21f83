"""The peers a suite measures icegres against, each answering SQL text (see bench/harness.Peer)."""
