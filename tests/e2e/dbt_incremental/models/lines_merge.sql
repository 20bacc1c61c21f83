{{ config(materialized='incremental', incremental_strategy='merge', unique_key=['order_id', 'line_no'],
          merge_exclude_columns=['loaded_in_run']) }}

-- loaded_in_run keeps the run that first inserted the line (merge_exclude_columns), updated_in_run
-- the last run that changed it.
select order_id, line_no, customer_id, qty, price, qty * price as line_total, status, updated_at,
       cast({{ var('run') }} as integer) as loaded_in_run, cast({{ var('run') }} as integer) as updated_in_run
from {{ source('raw', 'order_lines') }}
{% if is_incremental() %}
where updated_at > (select max(updated_at) from {{ this }})
{% endif %}
