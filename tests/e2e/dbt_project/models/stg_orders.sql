{{ config(materialized='ephemeral') }}

select order_id, customer_id, amount, ordered_at, gift
from {{ ref('orders') }}
where status <> 'cancelled'
