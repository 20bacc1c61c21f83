-- Singular test: every customer's total equals the sum of their orders that were not cancelled.
with expected as (
    select customer_id, sum(amount) as total
    from {{ ref('orders') }}
    where status <> 'cancelled'
    group by customer_id
)
select c.customer_id, c.total_amount, e.total
from {{ ref('customer_orders') }} as c
left join expected as e on e.customer_id = c.customer_id
where c.total_amount <> coalesce(e.total, 0)
