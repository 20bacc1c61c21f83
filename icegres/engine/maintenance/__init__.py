"""Table maintenance: snapshot expiry, orphan-file GC, compaction, manifest rewrite (issue 30)."""
