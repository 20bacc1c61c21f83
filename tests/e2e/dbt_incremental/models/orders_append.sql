{{ config(materialized='incremental', incremental_strategy='append') }}

-- Every version of every line, appended as it appears: no unique key.
select order_id, line_no, qty, price, status, updated_at, cast({{ var('run') }} as integer) as loaded_in_run
from {{ source('raw', 'order_lines') }}
{% if is_incremental() %}
where updated_at > (select max(updated_at) from {{ this }})
{% endif %}
