"""weather-skill 1.1.0: the forecast for a city, for one or more days."""


def run(city: str, days: int = 1) -> str:
    return "; ".join(f"day {n + 1}: sunny in {city}" for n in range(days))
