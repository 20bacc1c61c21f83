{{ config(materialized='incremental', incremental_strategy='merge', unique_key='customer_id') }}

-- Recomputed in full each run and merged: customers whose lines are all gone keep their last row.
select customer_id, count(*) as line_count, sum(qty * price) as total, max(updated_at) as updated_at
from {{ source('raw', 'order_lines') }}
group by customer_id
