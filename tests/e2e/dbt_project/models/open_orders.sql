{{ config(materialized='view') }}

select o.order_id, c.name as customer_name, o.amount, o.ordered_at, o.gift
from {{ ref('stg_orders') }} as o
join {{ ref('customers') }} as c on c.id = o.customer_id
