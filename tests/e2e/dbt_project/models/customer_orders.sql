{{ config(materialized='table') }}

select
    c.id as customer_id,
    c.name,
    c.is_active,
    c.credit_limit,
    count(o.order_id) as order_count,
    coalesce(sum(o.amount), 0) as total_amount,
    min(o.ordered_at) as first_ordered_at,
    bool_or(o.gift) as got_gift
from {{ ref('customers') }} as c
left join {{ ref('stg_orders') }} as o on o.customer_id = c.id
group by c.id, c.name, c.is_active, c.credit_limit
