{{ config(materialized='incremental', incremental_strategy='delete+insert', unique_key='id',
          on_schema_change='append_new_columns') }}

select *, upper(tier) as tier_code
from {{ source('raw', 'customers') }}
{% if is_incremental() %}
where updated_at > (select max(updated_at) from {{ this }})
{% endif %}
