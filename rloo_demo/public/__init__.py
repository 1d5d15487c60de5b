"""The public Space's policy: the limits, the rate gates, the admission middleware, the waiting line, which old runs
go, what an error may tell a caller, and the server's malloc tuning. A reader can skip this folder: the server's
services (``rloo_demo.server``) and the controller apply it where a caller reaches them."""
