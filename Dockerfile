FROM python:3.11-slim
# Built from /src, run from /app: a `duet/` source folder in the working directory would shadow the
# installed `duet` package (its subpackages live in the repository's agents/, workbenches/, api/).
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY duet ./duet
COPY agents ./agents
COPY workbenches ./workbenches
COPY api ./api
RUN pip install --no-cache-dir -c constraints.txt . && rm -rf /src
# Runs as an unprivileged user (numeric, so Kubernetes' runAsNonRoot can check it); the state
# directory is its own, and a new Compose volume mounted there inherits that owner.
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /app duet && mkdir -p /app /var/lib/duet && chown duet:duet /app /var/lib/duet
WORKDIR /app
USER 10001:10001
EXPOSE 8000
CMD ["duet", "serve", "--host", "0.0.0.0", "--port", "8000"]
