"""One module per working state of the machine (perceive, reason, act, observe and
the helper states). A phase does its work and names the trigger of its rows; it
never decides where the run goes next, and never re-derives why it was entered.
"""
