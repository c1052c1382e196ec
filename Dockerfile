FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY agents ./agents
COPY workbenches ./workbenches
COPY api ./api
COPY duet ./duet
RUN pip install --no-cache-dir -c constraints.txt .
EXPOSE 8000
CMD ["duet", "serve", "--host", "0.0.0.0", "--port", "8000"]
