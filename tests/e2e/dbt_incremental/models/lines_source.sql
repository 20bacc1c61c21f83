{{ config(materialized='view') }}

-- What lines_check snapshots: every column of the source but its updated_at.
select order_id, line_no, customer_id, qty, price, status
from {{ source('raw', 'order_lines') }}
