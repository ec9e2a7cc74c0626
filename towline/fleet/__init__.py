"""Running a fleet: schedules, model-call queues with shared rate limits, priorities and tenants."""
