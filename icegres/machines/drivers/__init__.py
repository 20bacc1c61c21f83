"""trio drivers: each performs one pure machine's effects and feeds the results back as events."""
