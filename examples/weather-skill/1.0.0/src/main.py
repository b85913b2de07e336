"""weather-skill 1.0.0: today's forecast for a city."""


def run(city: str) -> str:
    return f"sunny in {city}"
