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
WORKDIR /app
EXPOSE 8000
CMD ["duet", "serve", "--host", "0.0.0.0", "--port", "8000"]
