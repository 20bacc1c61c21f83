{{ config(materialized='incremental', incremental_strategy='microbatch', unique_key=['order_id', 'line_no'],
          event_time='updated_at', begin='2024-01-01', batch_size='year', lookback=0) }}

-- dbt reads the source one batch (a year of updated_at) at a time, filtered by its event_time; the
-- test passes --event-time-start/--event-time-end so the batches do not depend on today's date.
select order_id, line_no, qty, status, updated_at
from {{ source('raw', 'order_lines') }}
