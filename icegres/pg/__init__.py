"""PostgreSQL's own vocabulary, at the bottom of the house: SQLSTATEs and error values
(`errors`), type OIDs and the Arrow mapping (`types`), value codecs in text and binary format
(`text_in`, `text_out`, `binary_in`, `binary_out`, `params`, and a column at a time: `columns`,
`pieces`), time as PostgreSQL keeps it (`clock`) and session settings (`settings`).

The engine, both front ends and the write ladder import it; it imports none of them. Names with
a leading underscore are shared between the modules of this package only.
"""
