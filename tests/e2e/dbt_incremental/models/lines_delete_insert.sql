{{ config(materialized='incremental', incremental_strategy='delete+insert', unique_key=['order_id', 'line_no']) }}

select l.order_id, l.line_no, l.qty, l.price, c.name as customer_name, l.updated_at
from {{ source('raw', 'order_lines') }} as l
left join {{ source('raw', 'customers') }} as c on c.id = l.customer_id
{% if is_incremental() %}
where l.updated_at > (select max(updated_at) from {{ this }})
{% endif %}
