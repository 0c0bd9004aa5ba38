"""The local stack: moto server + template-driven tables, a werkzeug gateway and a streams pump."""
