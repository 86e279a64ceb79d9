"""The effects port: `Effects`, the one interface every side effect goes through.

`base` holds the port and its in-process default. The durable engines that
implement it (DBOS, Temporal) live in `statemachine_agent.durable`; the names
`statemachine_agent.effects.dbos` and `.temporal` still reach them.
"""
